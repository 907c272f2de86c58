"""Malformed sweep files, fed to the real `dtune sweep plan`: each one exits 2 with one line on
stderr naming the file and the key to fix, never a traceback, and nothing is expanded first (an
alias bomb is refused from the YAML node graph; a point count over --max-points is refused from
the axis lengths, before any point is built)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DTUNE = [str(REPO / "scripts" / "dtune")]
sys.path.insert(0, str(REPO / "sweeps"))
from dtune_sweep.safe_yaml import load_yaml  # noqa: E402
from dtune_sweep.spec import SweepError, plan  # noqa: E402

C = "binary: dtune-comm\n"


def bomb(levels: int) -> str:
    """A "billion laughs" document: level k is a list of 9 aliases of level k-1, so the last
    stands for 9**levels strings while the file stays a few hundred bytes. The levels sit under
    env:, which is checked after the axis that uses the last one (unchecked code would print it)."""
    lines = [C, "env:\n", "  L0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"]
    for k in range(1, levels):
        lines.append(f"  L{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 9) + "]\n")
    return "".join(lines) + f"axes: {{--collective: [*l{levels - 1}]}}\n"


# (sweep file text, a key path that the one error line must name)
CASES = [
    (C + "axes: [--collective, allreduce]\n", "axes:"),
    (C + "axes: {--collective: []}\n", "axes.--collective:"),
    (C + "axes: {--collective: }\n", "axes.--collective:"),
    (C + "axes: {--collective: {a: 1}}\n", "axes.--collective:"),
    (C + "axes: {null: [1]}\n", "axes[None]:"),
    (C + "axes: {7: [1]}\n", "axes[7]:"),
    (C + "env: [NCCL_ALGO, Ring]\n", "env:"),
    (C + "env: {true: [1]}\n", "env[True]:"),
    (C + "env: {nccl_algo: [Ring]}\n", "env.nccl_algo:"),
    (C + "zip: [{1: [a, b]}]\n", "zip[0][1]:"),
    (C + "zip: {--op: [sum]}\n", "zip:"),
    (C + "zip: [{}]\n", "zip[0]:"),
    (C + "zip: [[--op, sum]]\n", "zip[0]:"),
    (C + "zip: [{--op: [sum, max], --collective: [allreduce]}]\n", "zip[0]:"),
    (C + "axes: {--op: [sum]}\nzip: [{--op: [max], --collective: [allreduce]}]\n", "zip[0].--op:"),
    (C + "launch: [2]\n", "launch:"),
    (C + "launch: {gpus: 2}\n", "launch.gpus:"),
    (C + "launch: {ranks: true}\n", "launch.ranks:"),
    (C + "launch: {ranks: [two]}\n", "launch.ranks:"),
    (C + "launch: {ranks: []}\n", "launch.ranks:"),
    (C + "topology: {nccl-shm: 1}\n", "topology:"),
    (C + "topology: [nccl-shm, 3]\n", "topology:"),
    (C + "env: {NCCL_P2P_LEVEL: [SYS]}\ntopology: nccl-p2p-nvl\n", "topology:"),
    (C + "exclude: {--op: sum}\n", "exclude:"),
    (C + "axes: {--op: [sum, max]}\nexclude: [{--op: [sum]}]\n", "exclude[0].--op:"),
    (C + "axes: {--op: [sum, max]}\nexclude: [{--opp: sum}]\n", "exclude[0].--opp:"),
    (C + "exclude: [{}]\n", "exclude[0]:"),
    (C + "repeats: true\n", "repeats:"),
    (C + "repeats: [2]\n", "repeats:"),
    (C + "order: [random]\n", "order:"),
    (C + "order: random\nseed: [1, 2]\n", "seed:"),
    (C + "order: random\nseed: 1.5\n", "seed:"),
    (C + "steps: ten\n", "steps:"),
    (C + "steps: {n: 10}\n", "steps:"),
    ("sweeps: {a: {binary: dtune-comm}}\n", "sweeps:"),
    ("sweeps: []\n", "sweeps:"),
    ("sweeps:\n  - binary: dtune-comm\n  - 3\n", "sweeps[1]:"),
    ("sweeps: [{binary: dtune-comm}]\nbinary: dtune-comm\n", "binary:"),
    ("sweeps: [{binary: dtune-comm, name: a}, {binary: dtune-comm, name: a}]\n", "sweeps[1].name:"),
    ("sweeps: [{binary: dtune-comm, axes: {--op: [[sum]]}}]\n", "sweeps[0].axes.--op:"),
    ("binary: [dtune-comm]\n", "binary:"),
    ("axes: {--op: [sum]}\n", "binary:"),
    (C + "args: {-b: 8}\n", "args:"),
    (C + "args: [[-b, 8]]\n", "args:"),
    (C + "name: [a, b]\n", "name:"),
    (C + "colour: blue\n", "colour:"),
    (C + "axes: {--op: [sum]}\naxes: {--op: [max]}\n", "axes:"),
    ("", "(top level):"),
    ("- binary: dtune-comm\n", "(top level):"),
    (C + "axes: {--collective: " + "[" * 5000 + "]" * 5000 + "}\n", "axes.--collective[0]"),
    (C + "axes: {--collective: " + "[" * 40 + "x" + "]" * 40 + "}\n", "axes.--collective[0]"),
    # 10 * 9**5 values at L5 passes 100,000.
    (bomb(7), "env.L5:"),
    (C + "env: {NCCL_ALGO: [Ring]}\nzip: [{NCCL_ALGO: [Tree], --collective: [allreduce]}]\n", "env.NCCL_ALGO:"),
    (C + "args: [--op, sum]\naxes: {--op: [max]}\n", "axes.--op:"),
    (C + "args: [--op=sum]\naxes: {--op: [max]}\n", "axes.--op:"),
    ("binary: dtune-train\nsteps: 5\naxes: {--steps: [3]}\n", "axes.--steps:"),
    ("binary: dtune-data\nargs: [--samples, 8]\n", "args:"),
    ("binary: dtune-data\n", "args:"),
    ("binary: dtune-foo\n", "binary:"),
    (C + "env: {NCCL_ALGO: []}\n", "env.NCCL_ALGO:"),
    (C + "env: {NCCL_ALGO-X: [1]}\n", "env.NCCL_ALGO-X:"),
    (C + "zip: [{--op: [sum, max], NCCL_ALGO: [[Ring], Tree]}]\n", "zip[0].NCCL_ALGO:"),
    (C + "zip: [{--op: [[sum], max], NCCL_ALGO: [Ring, Tree]}]\n", "zip[0].--op:"),
    (C + 'name: ""\n', "name:"),
    (C + "constraints: {a: 1}\n", "constraints:"),
    (C + "axes: {--op: [sum]}\nconstraints: ['--op <=']\n", "constraints[0]:"),
    (C + "axes: {--op: [sum]}\nconstraints: ['--nope > 1']\n", "constraints:"),
    (C + "axes: {--op: [sum, sum]}\n", "two points are identical"),
    (C + "axes: {--op: [sum, max]}\nexclude: [{--op: sum}, {--op: max}]\n", "exclude:"),
    (C + "axes: {--iters: [1, 2]}\nconstraints: ['--iters > 5']\n", "constraints:"),
    (C + "exclude: [5]\n", "exclude[0]:"),
    (
        "sweeps:\n  - {binary: dtune-comm, env: {NCCL_ALGO: [Ring]}, zip: [{NCCL_ALGO: [Tree], --op: [sum]}]}\n",
        "sweeps[0].env.NCCL_ALGO:",
    ),
    (C + "args: [--op=a=b]\naxes: {--op: [max]}\n", "axes.--op:"),
    (C + "steps: 3\nargs: [--op, sum]\naxes: {--op: [max]}\n", "axes.--op:"),
]


# What each CASES file's one line says after the file name, word for word: the key path and what to
# write instead (mutation testing found that checking the key alone let an emptied or misplaced
# message pass). Checked in process, where scripts/mutation.sh's mutants are seen.
MESSAGES = [
    "axes: is a list; write a mapping, e.g. axes: {--batch: [8, 16]}",
    "axes.--collective: empty list of values; give at least one value",
    "axes.--collective: value None has the wrong type (null); use a number or a string, or a list of them",
    "axes.--collective: value {'a': 1} has the wrong type (a mapping); use a number or a string, or a list of them",
    "axes[None]: axis None must be a long flag such as --batch",
    "axes[7]: axis 7 must be a long flag such as --batch",
    "env: is a list; write a mapping, e.g. env: {NCCL_ALGO: [Ring, Tree]}",
    "env[True]: environment axis True must be a variable starting with one of NCCL_, UCX_, OMP_, OMPI_, DTUNE_, CUDA_, MKL_",  # noqa: E501
    "env.nccl_algo: environment axis 'nccl_algo' must be a variable starting with one of NCCL_, UCX_, OMP_, OMPI_, DTUNE_, CUDA_, MKL_",  # noqa: E501
    "zip[0][1]: environment axis 1 must be a variable starting with one of NCCL_, UCX_, OMP_, OMPI_, DTUNE_, CUDA_, MKL_",  # noqa: E501
    "zip: is a mapping; write a list of mappings, e.g. zip: [{--bucket-mb: [1, 25], --first-bucket-mb: [0.5, 1]}]",
    "zip[0]: is empty; write a mapping of axes to equally long lists, e.g. {--bucket-mb: [1, 25], --first-bucket-mb: [0.5, 1]}",  # noqa: E501
    "zip[0]: is a list; write a mapping of axes to equally long lists, e.g. {--bucket-mb: [1, 25], --first-bucket-mb: [0.5, 1]}",  # noqa: E501
    "zip[0]: lists of different lengths [1, 2]; a zip varies its lists together, so give each the same number of values",  # noqa: E501
    "zip[0].--op: --op is also an axis at axes.--op; vary it in one place",
    "launch: is a list; write a mapping, e.g. launch: {ranks: [2, 4]}",
    "launch.gpus: unknown key; launch takes ranks, nodes, ranks_per_node",
    "launch.ranks: True is not an integer >= 1; write e.g. ranks: 2",
    "launch.ranks: 'two' is not an integer >= 1; write e.g. ranks: 2",
    "launch.ranks: empty list of values; give at least one value",
    "topology: value {'nccl-shm': 1} has the wrong type (a mapping); use a number or a string, or a list of them",
    "topology: topology 3 is not one of ['default', 'mpi-shm', 'mpi-tcp', 'nccl-p2p-nvl', 'nccl-shm', 'nccl-socket', 'socket', 'ucx-shm', 'ucx-tcp']",  # noqa: E501
    "topology: topology 'nccl-p2p-nvl' sets NCCL_P2P_LEVEL, which an env or zip axis also sets (the preset would override it); drop one of the two",  # noqa: E501
    "exclude: is a mapping; write a list of rules, e.g. exclude: [{--batch: 64, --precision: fp32}]",
    "exclude[0].--op: is a list; an exclude rule names one value per axis (write one rule per value)",
    "exclude[0].--opp: '--opp' is not an axis of this sweep, so the rule would never match; axes: --op, nodes, ranks, ranks_per_node, topology",  # noqa: E501
    "exclude[0]: is empty; write a mapping of axis to value, e.g. {--batch: 64, --precision: fp32}",
    "repeats: True is not an integer >= 1; write e.g. repeats: 2",
    "repeats: [2] is not an integer >= 1; write e.g. repeats: 2",
    "order: ['random'] is not as-written or random",
    "seed: is a list; write one integer, e.g. seed: 7",
    "seed: is float; write one integer, e.g. seed: 7",
    "steps: 'ten' is not an integer >= 1; write e.g. steps: 2",
    "steps: {'n': 10} is not an integer >= 1; write e.g. steps: 2",
    "sweeps: is a mapping; write a non-empty list of sweeps (- binary: ...)",
    "sweeps: is a list; write a non-empty list of sweeps (- binary: ...)",
    "sweeps[1]: is int; each sweep is a mapping with 'binary:'",
    "binary: beside 'sweeps:' the file takes no other key; move it into a sweep",
    "sweeps[1].name: 'a' names sweeps[0] too; give each sweep its own name",
    "sweeps[0].axes.--op: value ['sum'] has the wrong type (a list); use a number or a string, or a list of them",
    "binary: binary ['dtune-comm'] is not one of ['dtune-comm', 'dtune-train', 'dtune-data']",
    "binary: binary None is not one of ['dtune-comm', 'dtune-train', 'dtune-data']",
    "args: is a mapping; write a list such as args: [-b, 8, -e, 1M]",
    "args: value ['-b', 8] has the wrong type (a list); use a number or a string, or a list of them",
    "name: is a list; write a name such as name: batch-sweep",
    "colour: unknown key; a sweep takes args, axes, binary, constraints, env, exclude, launch, name, order, repeats, seed, steps, topology, zip",  # noqa: E501
    "axes: given twice in one mapping (line 2 and line 3); keep one",
    "(top level): the file holds null; write a mapping with 'binary:' (one sweep) or 'sweeps:' (a list of them)",
    "(top level): the file holds a list; write a mapping with 'binary:' (one sweep) or 'sweeps:' (a list of them)",
    "axes.--collective" + "[0]" * 30 + ": nested more than 32 levels deep (line 2); a sweep file needs at most a few",
    "axes.--collective" + "[0]" * 30 + ": nested more than 32 levels deep (line 2); a sweep file needs at most a few",
    "env.L5: expands to more than 100,000 values (line 8; aliases of aliases, an alias bomb?); write a smaller sweep",
    "env.NCCL_ALGO: NCCL_ALGO is also an axis at zip[0]; vary it in one place",
    "axes.--op: --op is also a fixed argument (args: --op sum); give it in one place: drop it from args, or drop the axis",  # noqa: E501
    "axes.--op: --op is also a fixed argument (args: --op=sum); give it in one place: drop it from args, or drop the axis",  # noqa: E501
    "axes.--steps: --steps is also a fixed argument (steps: --steps 5); give it in one place: drop it from args, or drop the axis",  # noqa: E501
    "args: a dtune-data sweep runs `dtune-data bench`: write args: [bench, DATASET, ...]",
    "args: a dtune-data sweep runs `dtune-data bench`: write args: [bench, DATASET, ...]",
    "binary: binary 'dtune-foo' is not one of ['dtune-comm', 'dtune-train', 'dtune-data']",
    "env.NCCL_ALGO: empty list of values; give at least one value",
    "env.NCCL_ALGO-X: environment axis 'NCCL_ALGO-X' must be a variable starting with one of NCCL_, UCX_, OMP_, OMPI_, DTUNE_, CUDA_, MKL_",  # noqa: E501
    "zip[0].NCCL_ALGO: value ['Ring'] has the wrong type (a list); use a number or a string, or a list of them",
    "zip[0].--op: value ['sum'] has the wrong type (a list); use a number or a string, or a list of them",
    "name: is empty; write a name such as name: batch-sweep",
    "constraints: is a mapping; write a list, e.g. constraints: ['--first-bucket-mb <= --bucket-mb']",
    "constraints[0]: '--op <=': '' is not a flag (--batch), a variable (NCCL_ALGO), ranks, nodes, ranks_per_node, a number or a word",  # noqa: E501
    "constraints: constraint '--nope > 1' names --nope, which is neither an axis nor a fixed argument of this sweep (nor a default dtune knows): the constraint could not be checked",  # noqa: E501
    "two points are identical (the same arguments, environment and repeat)",
    "exclude: no points left after the exclusions; remove a rule",
    "constraints: no points left after the exclusions and constraints; remove a rule",
    "exclude[0]: is int; write a mapping of axis to value, e.g. {--batch: 64, --precision: fp32}",
    "sweeps[0].env.NCCL_ALGO: NCCL_ALGO is also an axis at sweeps[0].zip[0]; vary it in one place",
    "axes.--op: --op is also a fixed argument (args: --op=a=b); give it in one place: drop it from args, or drop the axis",  # noqa: E501
    "axes.--op: --op is also a fixed argument (args: --op sum --iters 3); give it in one place: drop it from args, or drop the axis",  # noqa: E501
]


def dtune(*args, timeout=120):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def one_error_line(r, file, key):
    assert r.returncode == 2, r.stdout + r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) < 600, r.stderr[:3000]
    assert lines[0].startswith(f"dtune: error: {file}: {key}"), lines[0]


@pytest.mark.parametrize("text,key", CASES, ids=[f"{i}-{k}" for i, (_, k) in enumerate(CASES)])
def test_malformed_sweep_file(tmp_path, text, key):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    one_error_line(dtune("sweep", "plan", f), f, key)


@pytest.mark.parametrize(
    "text,key,message", [(t, k, m) for (t, k), m in zip(CASES, MESSAGES, strict=True)], ids=range(len(CASES))
)
def test_each_malformed_file_gets_its_own_message(tmp_path, text, key, message):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(SweepError) as e:
        plan(str(f))
    assert message.startswith(key) and str(e.value) == f"{f}: {message}"


def test_bytes_that_are_not_utf8(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_bytes(b"binary: dtune-comm\nname: caf\xe9\n")
    r = dtune("sweep", "plan", f)
    one_error_line(r, f, "line 2:")
    assert "UTF-8" in r.stderr


def test_billion_laughs_is_refused_without_expanding(tmp_path):
    """9**9 strings behind ten lines; building them would take gigabytes. Refused from the node
    graph, naming the first key whose value is too large."""
    f = tmp_path / "s.yaml"
    f.write_text(bomb(9))
    with pytest.raises(SweepError, match=r"env.L5: expands to more than 100,000 values"):
        load_yaml(str(f))
    one_error_line(dtune("sweep", "plan", f), f, "env.L5:")


def test_recursive_alias_is_refused(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(C + "axes: &a {--collective: [allreduce], --op: *a}\n")
    r = dtune("sweep", "plan", f)
    one_error_line(r, f, "axes.--op:")
    assert "recursive alias" in r.stderr


def axes_file(tmp_path, n_axes, n_values):
    f = tmp_path / "big.yaml"
    f.write_text(
        C + "axes:\n" + "".join(f"  --a{k}: [{', '.join(str(v) for v in range(n_values))}]\n" for k in range(n_axes))
    )
    return f


def test_max_points_refuses_from_the_count(tmp_path):
    """10**12 points: only a count can refuse this (expanding it would never end)."""
    f = axes_file(tmp_path, 6, 100)
    for cmd in (["plan"], ["run", "--out", tmp_path / "o"], ["slurm", "--dry-run", "--out", tmp_path / "o"]):
        r = dtune("sweep", *cmd[:1], f, *cmd[1:], "--max-points", 1000)
        one_error_line(r, f, "sweep0:")
        assert "1,000,000,000,000 points" in r.stderr and "--max-points 1,000" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
    with pytest.raises(SweepError, match="1,000,000,000,000 points"):
        plan(str(f), max_points=10)


def test_max_points_default_refuses_a_million(tmp_path):
    f = axes_file(tmp_path, 6, 10)
    r = dtune("sweep", "plan", f, timeout=60)
    one_error_line(r, f, "sweep0:")
    assert "1,000,000 points" in r.stderr and "--max-points 100,000" in r.stderr, r.stderr


def test_max_points_admits_a_file_at_the_cap(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(C + "args: [-b, 8]\naxes: {--op: [sum, max], --collective: [allreduce, reduce]}\nrepeats: 3\n")
    assert len(plan(str(f), max_points=12)) == 12
    with pytest.raises(SweepError, match="12 points"):
        plan(str(f), max_points=11)
    r = dtune("sweep", "plan", f, "--max-points", 0)
    assert r.returncode == 2 and "--max-points" in r.stderr, r.stderr


def plan_text(tmp_path, text, **kw):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    return f, plan(str(f), **kw)


def test_args_as_a_string_or_null_and_steps_beside_them(tmp_path):
    """args: may be one string (split on spaces) or null (none); steps: adds the binary's step flag
    after the fixed args, keeping them."""
    _, listed = plan_text(tmp_path, C + "args: [-b, 8, -e, 1M]\nsteps: 3\n")
    _, text = plan_text(tmp_path, C + "args: -b 8 -e 1M\nsteps: 3\n")
    assert [p.args for p in listed] == [p.args for p in text] == [["-b", "8", "-e", "1M", "--iters", "3"]]
    _, none = plan_text(tmp_path, C + "args:\n")
    assert [p.args for p in none] == [[]]


def test_a_constraint_may_name_a_fixed_argument(tmp_path):
    text = C + "args: [--iters, 5]\naxes: {--warmup-iters: [1, 10]}\n"
    _, pts = plan_text(tmp_path, text + "constraints: ['--warmup-iters <= --iters']\n")
    assert [p.values["--warmup-iters"] for p in pts] == [1]


def test_random_order_without_a_seed_is_seed_0(tmp_path):
    axes = "axes: {--op: [sum, max, min, prod], --collective: [allreduce, reduce, broadcast]}\n"
    _, unseeded = plan_text(tmp_path, C + axes + "order: random\n")
    _, seed0 = plan_text(tmp_path, C + axes + "order: random\nseed: 0\n")
    _, seed1 = plan_text(tmp_path, C + axes + "order: random\nseed: 1\n")
    assert [p.id for p in unseeded] == [p.id for p in seed0] != [p.id for p in seed1]


def test_max_points_names_the_largest_sweep_by_its_place_in_the_file(tmp_path):
    text = "sweeps:\n  - {binary: dtune-comm, name: big, axes: {--op: [sum, max, min, prod]}}\n"
    text += "  - {binary: dtune-comm, name: small, axes: {--op: [sum, max]}}\n"
    f, _ = plan_text(tmp_path, text)
    with pytest.raises(SweepError) as e:
        plan(str(f), max_points=5)
    assert str(e.value).startswith(f"{f}: sweeps[0]: the file plans 6 points (4 in sweep 'big',"), str(e.value)


def test_known_flags_given_as_a_function_are_checked(tmp_path):
    f, _ = plan_text(tmp_path, C + "axes: {--opp: [sum]}\n")
    with pytest.raises(SweepError) as e:
        plan(str(f), known_flags=lambda: {"dtune-comm": {"--op"}})
    assert str(e.value) == f"{f}: axes.--opp: unknown axis '--opp' (not a flag of dtune-comm; see its --help)"


def test_points_breaking_a_rule_are_listed_twenty_at_most_under_their_sweep(tmp_path):
    buckets = ", ".join(str(b) for b in range(1, 22))
    text = "sweeps:\n  - {binary: dtune-comm, name: ok}\n"
    text += "  - {binary: dtune-train, name: b, args: [--first-bucket-mb, 100], "
    text += f"axes: {{--bucket-mb: [{buckets}]}}}}\n"
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(SweepError) as e:
        plan(str(f))
    lines = str(e.value).splitlines()
    assert lines[0].startswith(f"{f}: sweeps[1]: 21 of 21 points of sweep 'b' break dtune-train's"), lines[0]
    assert len(lines) == 1 + 20 + 1 and lines[-1] == "  ... 1 more", lines[-3:]


def test_a_zip_sets_its_environment_variables_with_its_arguments(tmp_path):
    _, pts = plan_text(tmp_path, C + "zip: [{--op: [sum, max], NCCL_ALGO: [Ring, Tree]}]\n")
    assert [(p.args, p.env) for p in pts] == [
        (["--op", "sum"], {"NCCL_ALGO": "Ring"}),
        (["--op", "max"], {"NCCL_ALGO": "Tree"}),
    ]
