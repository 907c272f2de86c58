"""dtune sweeps: declarative sweep files expanded into points, launched locally with mpirun (with
resume) or as Slurm job arrays, and merged into one HDF5 file. The sweep-file format is in spec.py,
sweeps/README.md and doc/sweeps.md."""
