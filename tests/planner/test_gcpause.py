"""planner.gcpause: the collector is off during start-up, back on (with start-up objects frozen) after resume(),
and exactly as before once the block is left, on success and on error; sailor-plan's answer does not change."""
import gc
import json

import pytest

from planner.gcpause import paused


def test_paused_then_resumed_then_restored():
    assert gc.isenabled()
    frozen_before = gc.get_freeze_count()
    with paused() as resume:
        assert not gc.isenabled()
        keep = [object() for _ in range(10)]
        resume()
        assert gc.isenabled() and gc.get_freeze_count() > frozen_before
        resume()                                     # a second call changes nothing
        assert gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == frozen_before
    assert len(keep) == 10


def test_state_restored_on_error_and_when_the_collector_was_off():
    frozen_before = gc.get_freeze_count()
    with pytest.raises(ValueError):
        with paused():
            raise ValueError("x")
    assert gc.isenabled() and gc.get_freeze_count() == frozen_before
    gc.disable()
    try:
        with paused() as resume:
            resume()                                 # the collector was off: it stays off, nothing is frozen
            assert not gc.isenabled() and gc.get_freeze_count() == frozen_before
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_sailor_plan_gives_the_same_answer_and_restores_the_collector(capsys):
    from planner.cli_plan import main, main_args
    frozen_before = gc.get_freeze_count()
    argv = ["--model", "tiny", "--gpus", "A100-40@z=4", "--json", "--no-comparator"]
    assert main(argv) == 0
    paused_out = json.loads(capsys.readouterr().out)
    assert gc.isenabled() and gc.get_freeze_count() == frozen_before
    assert main_args(argv) == 0                      # the collector on throughout
    plain_out = json.loads(capsys.readouterr().out)
    paused_out.pop("search_time_s"), plain_out.pop("search_time_s")
    assert paused_out == plain_out


def test_sailor_plan_json_line_is_what_json_dump_wrote(capsys):
    """stdout is written with json.dumps (the C encoder) instead of json.dump (Python, chunk by chunk): the
    same bytes, here on a report with alternatives."""
    import io
    from planner.cli_plan import main
    assert main(["--model", "tiny", "--gpus", "A100-40@z=4,V100-16@z=4", "--json", "--top", "3"]) == 0
    text = capsys.readouterr().out
    buf = io.StringIO()
    json.dump(json.loads(text), buf)
    assert text == buf.getvalue() + "\n" and "alternatives" in text
