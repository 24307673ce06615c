"""launch.elastic: the torch-free elastic controller (``sailor-elastic``): availability sources, re-planning
through the planner, checkpoint-stop-relaunch of the training job (docs/ELASTIC.md)."""
