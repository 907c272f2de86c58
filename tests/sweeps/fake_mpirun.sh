#!/bin/sh
# A stand-in for mpirun for the tuner's synthetic tests (DTUNE_MPIRUN): one process, the `-x NAME=value`
# settings exported, the launcher's own options dropped; then the program with its arguments. With
# FAKE_MPIRUN_LOG set, each launch first appends its whole argument list there (one line).
if [ -n "${FAKE_MPIRUN_LOG:-}" ]; then printf '%s\n' "$*" >> "$FAKE_MPIRUN_LOG"; fi
while [ $# -gt 0 ]; do
  case "$1" in
    -np|--map-by|--hostfile|--tune) shift 2 ;;
    --oversubscribe|--allow-run-as-root) shift ;;
    -x) export "$2"; shift 2 ;;
    *) exec "$@" ;;
  esac
done
