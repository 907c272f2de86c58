#!/usr/bin/env bash
# Mutation testing of the Python code that decides what users change (mutmut 3, configured in
# pyproject.toml [tool.mutmut]): report/dtune_report/{compare,identity,verdicts,tables,main_summary,
# model_pieces,sharding}.py and sweeps/dtune_sweep/{halving,paired,earlier,levels,axes,rules,spec,runner,
# disk}.py against the fast tests that call them. NOT part of the test command (scripts/test.sh): run it after changing these modules, then kill each new
# survivor with a test or list it, with the reason it cannot change behaviour, in
# tests/mutation/survivors.txt. Prints a table per module and exits 1 when a mutant survives that
# the baseline does not list.
#
#   scripts/mutation.sh [--update-baseline] [--fresh | --table | --survivors] [MODULE...]
#     MODULE            compare identity verdicts tables main_summary model_pieces sharding halving
#                       paired earlier levels axes rules spec runner disk (default: all)
#     --update-baseline rewrite the baseline's entries for these modules as the survivors now
#                       (reasons kept; a new entry says TODO until someone writes its reason)
#     --fresh           forget mutmut's cached results (build-mutation/) and test every mutant again
#     --table           run nothing: the table and the comparison from the results cached so far
#     --survivors       test only the mutants that survived so far again (after adding tests)
#
# mutmut names a mutant after its file's path and matches that against the module's import name,
# which for report/dtune_report/compare.py would be report.dtune_report.compare. So the run happens
# in a staged tree, build-mutation/ (git-ignored), with the packages under src/; its mutants/
# folder (mutmut's working copy) gets report/ and sweeps/ folders whose package links to the
# mutated copy, so tests that put REPO/report or REPO/sweeps on sys.path import the mutants.
# Results are cached there: a second run tests only mutants of changed functions and, again, the
# mutants that survived before (the tests may have changed). One mutmut child, at nice 19
# (DTUNE_MUTATION_CHILDREN=2 runs two, for a machine with nothing else to do).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${DTUNE_PYTHON:-$repo/.venv/bin/python}
stage=$repo/build-mutation
baseline=$repo/tests/mutation/survivors.txt
all_modules=(compare identity verdicts tables main_summary model_pieces sharding halving paired earlier levels axes)
all_modules+=(rules spec runner disk)

usage() { sed -n '10,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
update=0
fresh=0
table_only=0
survivors_only=0
modules=()
for arg in "$@"; do
  case $arg in
    --update-baseline) update=1 ;;
    --fresh) fresh=1 ;;
    --table) table_only=1 ;;
    --survivors) survivors_only=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "mutation.sh: unknown option $arg" >&2; usage >&2; exit 2 ;;
    *)
      if [[ ! " ${all_modules[*]} " == *" $arg "* ]]; then
        echo "mutation.sh: no module '$arg'; choose from: ${all_modules[*]}" >&2
        exit 2
      fi
      modules+=("$arg") ;;
  esac
done
((${#modules[@]})) || modules=("${all_modules[@]}")
dotted=()
for m in "${modules[@]}"; do
  case $m in
    compare | identity | verdicts | tables | main_summary | model_pieces | sharding) dotted+=("dtune_report.$m") ;;
    *) dotted+=("dtune_sweep.$m") ;;
  esac
done
globs=()
for d in "${dotted[@]}"; do globs+=("$d.*"); done

if ((table_only)) && [[ ! -d $stage/mutants ]]; then
  echo "mutation.sh: no results yet in $stage: run without --table" >&2
  exit 2
fi
if [[ ! -x $py ]]; then
  echo "mutation.sh: no Python at $py: run scripts/setup.sh (or set DTUNE_PYTHON)" >&2
  exit 2
fi
mutmut=(nice -n 19 env -u PYTHONPATH "$py" -m mutmut)
# Mutant names with a status other than killed, of the chosen modules: "name status".
undetected() {
  "${mutmut[@]}" results 2>/dev/null | sed -n 's/^ *\([^ :]*\): \(.*\)$/\1 \2/p' |
    grep -E "^($(IFS='|'; echo "${dotted[*]//./\\.}"))\." || true
}
# mutmut lists every mutant it was asked for by name: the killed ones are left out here (its
# progress line ends in a carriage return, so split there too and pass it on as it comes).
run() {
  "${mutmut[@]}" run --max-children "${DTUNE_MUTATION_CHILDREN:-1}" "$@" | "$py" -c '
import os, re, sys
pending = b""
while chunk := os.read(0, 4096):
    *done, pending = re.split(rb"(?<=[\r\n])", pending + chunk)
    sys.stdout.buffer.write(b"".join(s for s in done if not s.startswith("\U0001f389 ".encode())))
    sys.stdout.buffer.flush()
sys.stdout.buffer.write(pending)'
}
elapsed="-"
if ((!table_only)); then
  venv=$("$py" -c 'import sys; print(sys.prefix)')
  export DTUNE_BIN_DIR=${DTUNE_BIN_DIR:-$repo/build/bin}
  if [[ ! -x $DTUNE_BIN_DIR/dtune-comm ]]; then
    echo "mutation.sh: no dtune-comm in $DTUNE_BIN_DIR (some selected tests need it): build first" >&2
    exit 2
  fi

  # The staged tree: fresh copies of the packages, tests, the dtune command and the config (cp -a
  # keeps modification times: mutmut re-mutates a file only when its source is newer than its mutant).
  ((fresh)) && rm -rf "$stage"
  mkdir -p "$stage/src" "$stage/scripts" "$stage/mutants/scripts" "$stage/mutants/report" "$stage/mutants/sweeps"
  # Survivors are tested again when the tests changed since the last run (mutmut keeps their verdict).
  tests_changed=1
  [[ -d $stage/tests ]] && diff -rq -x __pycache__ "$repo/tests" "$stage/tests" >/dev/null && tests_changed=0
  rm -rf "$stage/src/dtune_report" "$stage/src/dtune_sweep" "$stage/tests" "$stage/mutants/tests"
  cp -a "$repo/report/dtune_report" "$repo/sweeps/dtune_sweep" "$stage/src/"
  cp -a "$repo/tests" "$stage/tests"
  find "$stage/src" "$stage/tests" -name __pycache__ -prune -exec rm -rf {} +
  cp -a "$repo/pyproject.toml" "$stage/"
  cp -a "$repo/scripts/dtune" "$stage/scripts/"
  cp -a "$repo/scripts/dtune" "$stage/mutants/scripts/"
  ln -sfn "$venv" "$stage/mutants/.venv"
  ln -sfn "$repo/doc" "$stage/mutants/doc"
  ln -sfn "$repo/benchmarks" "$stage/mutants/benchmarks"  # tests read dtune-train's options.cc
  ln -sfn "$repo/train" "$stage/mutants/train"  # and the attributes its writers write
  for top in report sweeps; do
    for entry in "$repo/$top"/*; do
      name=$(basename "$entry")
      case $name in
        dtune_report | dtune_sweep) ln -sfn "../src/$name" "$stage/mutants/$top/$name" ;;
        *) ln -sfn "$entry" "$stage/mutants/$top/$name" ;;
      esac
    done
  done

  cd "$stage"
  before=""
  [[ -d mutants/src ]] && ((tests_changed)) && before=$(undetected | awk '$2 == "survived" {print $1}')

  start=$(date +%s)
  if ((survivors_only)); then
    mapfile -t globs < <(undetected | awk '$2 == "survived" {print $1}')
    before=""
  fi
  ((${#globs[@]})) && run "${globs[@]}"
  # A survivor of an earlier run meets the changed tests.
  mapfile -t again < <(comm -12 <(sort <<<"$before") <(undetected | awk '$2 == "survived" {print $1}' | sort) | sed '/^$/d')
  if ((${#again[@]})); then
    echo "mutation.sh: testing again ${#again[@]} mutants that survived the previous run"
    run "${again[@]}"
  fi
  elapsed=$(($(date +%s) - start))
fi

cd "$stage"
"${mutmut[@]}" results --all true >mutants/dtune-results.txt 2>/dev/null
"$py" - mutants/dtune-results.txt "$baseline" "$update" "$elapsed" "${dotted[@]}" <<'EOF'
"""Reads `mutmut results --all true` ("    name: status" per mutant), prints the table per module,
compares the survivors with the baseline and, when asked, rewrites the baseline's entries."""

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

results, baseline_path, update, elapsed = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
modules = sys.argv[5:]
status_by_name = {}
for line in results.read_text().splitlines():
    m = re.match(r"\s*(\S+): (.+)$", line)
    if m:
        status_by_name[m.group(1)] = m.group(2).strip()


def module_of(name):
    return name.partition("__mutmut_")[0].rpartition(".")[0]


counts = defaultdict(Counter)
survivors = set()
for name, status in status_by_name.items():
    module = module_of(name)
    if module not in modules:
        continue
    counts[module][status] += 1
    if status == "survived":
        survivors.add(name)

took = "from the results cached so far" if elapsed == "-" else f"{elapsed} s"
print(f"\nmutation.sh: {took}; kill rate = killed / mutants (other: timeout, suspicious, no tests, ...)")
print(f"{'module':<24}{'mutants':>8}{'killed':>8}{'survived':>9}{'other':>7}{'kill rate':>10}")
total = Counter()
for module in modules:
    c = counts[module]
    n, killed, survived = sum(c.values()), c["killed"], c["survived"]
    total.update(c)
    rate = f"{100 * killed / n:.1f}%" if n else "-"
    print(f"{module:<24}{n:>8}{killed:>8}{survived:>9}{n - killed - survived:>7}{rate:>10}")
n = sum(total.values())
if len(modules) > 1 and n:
    other = n - total["killed"] - total["survived"]
    rate = f"{100 * total['killed'] / n:.1f}%"
    print(f"{'all':<24}{n:>8}{total['killed']:>8}{total['survived']:>9}{other:>7}{rate:>10}")
not_run = sorted(name for name, s in status_by_name.items() if module_of(name) in modules and s == "not checked")
if not_run:
    print(f"mutation.sh: {len(not_run)} mutants not checked (an interrupted run?)")

# The baseline: one mutant per line, "name  reason"; '#' starts a comment.
header, reason_by_name = [], {}
if baseline_path.exists():
    for line in baseline_path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            (header if not reason_by_name else []).append(line)
            continue
        name, _, reason = line.strip().partition(" ")
        reason_by_name[name] = reason.strip()
listed = {name for name in reason_by_name if module_of(name) in modules}
new = sorted(survivors - listed)
gone = sorted(listed - survivors)
if gone:
    print(f"\nmutation.sh: {len(gone)} baseline entries no longer survive (--update-baseline drops them):")
    print("\n".join(f"  {name}" for name in gone))
if new:
    print(f"\nmutation.sh: {len(new)} new survivors: kill each with a test, or list it in {baseline_path}")
    print("with the reason it cannot change behaviour (see one with: cd build-mutation && mutmut show NAME)")
    print("\n".join(f"  {name}" for name in new))
if update:
    kept = {k: v for k, v in reason_by_name.items() if module_of(k) not in modules}
    todo = "TODO: kill with a test or say why it is equivalent"
    kept.update({name: reason_by_name.get(name) or todo for name in survivors})
    width = max((len(k) for k in kept), default=0)
    body = [f"{k:<{width}}  {v}" for k, v in sorted(kept.items())]
    baseline_path.parent.mkdir(parents=True, exist_ok=True)
    baseline_path.write_text("\n".join(header + body) + "\n")
    print(f"mutation.sh: wrote {len(kept)} entries to {baseline_path}")
    sys.exit(0)
sys.exit(1 if new else 0)
EOF
