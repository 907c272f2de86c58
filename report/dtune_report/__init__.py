"""dtune_report: read dtune's HDF5 results (results/SCHEMA.md) into pandas and plot them.

Every report goes through `loader`, so the schema is interpreted in one place. The loader (pandas,
h5py) is imported on first use of these names, so that the small modules the `dtune` parser and
the sweep runner read (redact, model_assumptions) load without it.
"""

__all__ = ["SCHEMA_VERSION", "load_comm", "load_comm_summary", "read_provenance"]


def __getattr__(name):
    if name in __all__:
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
