"""The doc/ pages stay true, as the README does (tests/smoke/test_new_user.py pastes its tasks): every
page is linked from the README, every relative link of the README and the pages leads to a file
(and heading) that exists, and every command block of a page that can run here is pasted, as it is,
into a clean copy of the checkout (test_new_user's clone, with ~/my-photos and a small text corpus
in corpus/) and must exit 0, each `--output FILE` it names then existing. The README stays within
260 lines.

Which blocks run is read from the pages themselves, by one rule:
- a bare fenced block (```) holds commands, one per line (`\\` joins lines, `#` starts a comment);
- a block whose previous line is `<!-- not run by the test: REASON -->` is not run, and the test
  prints each such block with its reason (a GPU, several nodes, root, Slurm, a long run, files of
  your own); a marker without a reason is an error;
- a ```text block is output or a file's contents, never a command; any other language is an error.
The README's own bare blocks are its three everyday tasks (test_new_user.py) or carry the marker."""

import re
import shlex
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "smoke")]
from test_new_user import make_clone, sh  # noqa: E402

MARKER = re.compile(r"^<!-- not run by the test: (.+?) -->$")
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```$", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGES = sorted((REPO / "doc").glob("*.md"))


class Block:
    """One fenced block: its page, line, language, command lines and (if marked) why it is not run."""

    def __init__(self, page: Path, text: str, m: re.Match):
        self.page, self.lang = page.relative_to(REPO), m.group(2)
        self.start, self.line = m.start(), text.count("\n", 0, m.start()) + 1
        before = [ln.strip() for ln in text[: m.start()].splitlines() if ln.strip()]
        last = before[-1] if before else ""
        marker = MARKER.match(last)
        assert marker or not last.startswith("<!-- not run"), f"{self}: write the marker as {MARKER.pattern}"
        self.not_run = marker.group(1).strip() if marker else None
        joined = re.sub(r"\\\n\s*", " ", m.group(3))
        self.commands = [c.strip() for c in joined.splitlines() if c.strip() and not c.strip().startswith("#")]

    def __repr__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [Block(page, text, m) for m in FENCE.finditer(text)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_stays_a_readme():
    # issue 34: the manual lives in doc/; the README keeps what a newcomer reads first
    assert len((REPO / "README.md").read_text().splitlines()) <= 260


def test_every_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text()
    linked = {m.split("#")[0] for m in LINK.findall(readme)}
    assert PAGES and [p for p in PAGES if f"doc/{p.name}" not in linked] == []


@pytest.mark.parametrize("page", [REPO / "README.md", *PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_lead_somewhere(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            heads = {slug(h) for h in re.findall(r"^#+ (.+)$", FENCE.sub("", dest.read_text()), re.M)}
            broken += [] if anchor in heads else [target]
    assert not broken, broken


def test_readme_blocks_are_its_tasks_or_marked():
    text = (REPO / "README.md").read_text()
    tasks = text.split("## Three everyday tasks", 1)[1].split("\n## ", 1)[0]
    start = text.index(tasks)
    for b in blocks(REPO / "README.md"):
        in_tasks = start <= b.start < start + len(tasks)
        assert b.lang in ("", "text"), f"{b}: ```{b.lang}: use ``` for commands, ```text for output"
        assert b.lang == "text" or in_tasks or b.not_run, f"{b}: a README command block outside the tasks, unmarked"


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """test_new_user's clean copy of the checkout, with ~/my-photos."""
    return make_clone(tmp_path_factory.mktemp("docpages"))


@pytest.fixture(scope="module")
def corpus(clone):
    """The text the data page's `convert tokens corpus/` reads: a few files, one of them binary."""
    dst, _ = clone
    (dst / "corpus" / "sub").mkdir(parents=True)
    line = "The quick brown fox jumps over the lazy dog, and the data loader reads it back.\n"
    for i in range(4):
        (dst / "corpus" / f"part{i}.txt").write_text(line * (200 + 50 * i))
    (dst / "corpus" / "sub" / "notes.md").write_text(line * 100)
    (dst / "corpus" / "sub" / "blob.bin").write_bytes(bytes(range(256)) * 4)
    return dst / "corpus"


def outputs(cmd: str) -> list[str]:
    words = shlex.split(cmd, comments=True)
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--output" and "*" not in words[i + 1]]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_commands_run_here(page, clone, corpus, capsys):
    dst, _ = clone
    found = blocks(page)
    for b in found:
        assert b.lang in ("", "text"), f"{b}: ```{b.lang}: use ``` for commands, ```text for output"
    for b in found:
        if b.lang == "text":
            continue
        if b.not_run:
            with capsys.disabled():
                print(f"\n  not run: {b}: {b.not_run}")
            continue
        for cmd in b.commands:
            r = sh(clone, cmd, timeout=300)
            assert r.returncode == 0, f"{b}: {cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            missing = [o for o in outputs(cmd) if not (dst / o).exists()]
            assert not missing, f"{b}: {cmd}: no {missing}"
