"""Schemas of the planner's and launcher's input files (types and ranges; the readers check meaning).

Contract: one pydantic model per file kind -- :class:`PlanFile`, :class:`SailorPlanFile`,
:class:`ClusterFile`, :class:`InventoryFile`, :class:`NetworkFile`, :class:`CatalogFile`,
:class:`ProfileFile` -- each refusing unknown keys, wrong types, non-finite numbers and counts outside
[0, MAX_GPUS] (1,000,000 GPUs per pool, per node list and per plan). Validate with
:func:`planner.schema.base.validate`, which reports the first problem on one line.

The models live in :mod:`planner.schema.plan_files`, :mod:`~planner.schema.cluster_files`,
:mod:`~planner.schema.data_files` and :mod:`~planner.schema.runtime_constants_file`; a name imported from
here loads only its own module, so a process builds only the schemas of the file kinds it reads.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from planner.lazy import lazy_exports

_HOME = {
    "ReplicaIn": "plan_files", "StageIn": "plan_files", "PlanFile": "plan_files", "SailorDevice": "plan_files",
    "SailorReplica": "plan_files", "SailorPipeline": "plan_files", "SailorPlanFile": "plan_files",
    "PoolIn": "cluster_files", "ClusterFile": "cluster_files", "EmulateIn": "cluster_files",
    "NodeIn": "cluster_files", "InventoryFile": "cluster_files",
    "ClassLinkIn": "data_files", "NetworkFile": "data_files", "GPUEntryIn": "data_files", "CatalogFile": "data_files",
    "Pair": "data_files", "ProfileEntryIn": "data_files", "ProfileFile": "data_files",
    "CoreShareIn": "runtime_constants_file", "RuntimeConstantsFile": "runtime_constants_file",
}

if TYPE_CHECKING:
    from planner.schema.cluster_files import ClusterFile, EmulateIn, InventoryFile, NodeIn, PoolIn  # noqa: F401
    from planner.schema.data_files import (CatalogFile, ClassLinkIn, GPUEntryIn, NetworkFile,  # noqa: F401
                                           ProfileEntryIn, ProfileFile)
    from planner.schema.plan_files import (PlanFile, ReplicaIn, SailorPipeline, SailorPlanFile,  # noqa: F401
                                           StageIn)
    from planner.schema.runtime_constants_file import CoreShareIn, RuntimeConstantsFile  # noqa: F401


__getattr__, __dir__ = lazy_exports(__name__, "planner.schema", _HOME, globals())


__all__ = ["PlanFile", "SailorPlanFile", "ClusterFile", "InventoryFile", "NetworkFile", "CatalogFile",
           "ProfileFile", "RuntimeConstantsFile"]
