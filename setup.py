"""megatron-sailor: plan, simulate and train GPT models on heterogeneous, geo-distributed GPU pools."""
from setuptools import find_packages, setup

# The planner and the simulator need only numpy; the runtime needs torch + megatron-core (extra "runtime",
# installed by default through "all" in .ci/run). torch is pinned: an unpinned torch pulls a CUDA build.
RUNTIME = ["torch==2.13.0", "megatron-core==0.16.1", "einops>=0.7"]
PLOT = ["matplotlib>=3.7"]
# import-linter: `lint-imports` checks the layering contracts of pyproject.toml (docs/ARCHITECTURE.md)
# scipy's HiGHS LP solver: the pool prices of the bound on Sailor's space (planner/search/mixbound.py, imported
# lazily; without it the bound stays valid, only looser). Part of "test" (its tests check the bound's tightness).
LP = ["scipy>=1.10"]
TEST = ["pytest>=7", "pytest-timeout>=2.1", "pytest-xdist>=3", "import-linter>=2.1", "hypothesis>=6"] + LP
# Megatron-LM habits (docs/MEGATRON_ARGS.md): TensorBoard / W&B logging, BPE tokenizers, Hugging Face checkpoints
TENSORBOARD = ["tensorboard>=2.14"]
WANDB = ["wandb>=0.16"]
TEXT = ["tokenizers>=0.15"]
HF = ["transformers>=4.40", "safetensors>=0.4", "tokenizers>=0.15"]

setup(
    name="megatron-sailor",
    version="0.1.0",
    description="Plan, simulate and train GPT models on heterogeneous, multi-zone GPU pools",
    python_requires=">=3.10",
    packages=find_packages(include=["planner*", "megatron_sailor*", "patches*", "launch*"]),
    package_data={"planner": ["data/*.json"]},
    install_requires=["numpy>=1.24", "rich>=13", "PyYAML>=6", "pydantic>=2"],
    extras_require={"runtime": RUNTIME, "plot": PLOT, "test": TEST, "tensorboard": TENSORBOARD, "wandb": WANDB,
                    "text": TEXT, "hf": HF, "lp": LP,
                    "all": RUNTIME + PLOT + TEST + TENSORBOARD + WANDB + TEXT + HF},
    entry_points={
        "console_scripts": [
            "sailor-sim=planner.cli_sim:entry",
            "sailor-plan=planner.cli_plan:main",
            "sailor-topology=megatron_sailor.runtime.topology:main",
            "sailor-preprocess=megatron_sailor.train.preprocess:main",
            "sailor-launch=launch.cli:main",
            "sailor-slurm=launch.slurm:main",
            "sailor-elastic=launch.elastic.cli:main",
            "sailor-profile=megatron_sailor.profiler.cli:main",
        ]
    },
)
