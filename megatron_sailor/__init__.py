"""megatron-sailor runtime: execute a heterogeneous plan on torch + megatron-core.

See docs/RUNTIME.md. Importing this package silences megatron-core's "Transformer Engine and Apex are not
installed" warnings (they are expected: the runtime uses the local layer spec).
"""
import warnings

warnings.filterwarnings("ignore", message=".*Transformer Engine and Apex are not installed.*")
warnings.filterwarnings("ignore", message=".*Apex is not installed.*")
warnings.filterwarnings("ignore", category=UserWarning, module=r"megatron\.core\..*")
