"""dtune_report: read dtune's HDF5 results (results/SCHEMA.md) into pandas and plot them.

Every report goes through `loader`, so the schema is interpreted in one place.
"""

from .loader import SCHEMA_VERSION, load_comm, load_comm_summary, read_provenance

__all__ = ["SCHEMA_VERSION", "load_comm", "load_comm_summary", "read_provenance"]
