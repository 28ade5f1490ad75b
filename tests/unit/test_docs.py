"""The house's documents: every relative link resolves to a page and heading, no page
grows into a notebook, the code cites no notes page, the results table agrees with the
episodes it was made from, and the generated pages agree with the table."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

from tests.helpers import ROOT

MAX_PAGE_CHARS = 20_000
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_pages() -> list:
    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    return [ROOT / name for name in tracked]


def heading_anchors(page) -> set:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    turned into hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_in_the_readme_and_docs_resolves_to_a_page_and_heading():
    broken = []
    for page in markdown_pages():
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            file_part, _, anchor = target.partition("#")
            path = (page.parent / file_part).resolve() if file_part else page
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in heading_anchors(path):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_no_page_is_over_20k_characters():
    long = {str(page.relative_to(ROOT)): n for page in markdown_pages()
            if (n := len(page.read_text())) > MAX_PAGE_CHARS}
    assert long == {}


def test_the_code_cites_no_notes_page():
    """Comments say why; measurements live in results/, not in pages the code points at."""
    cites = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "impala").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"[\w/-]+\.md\b", line)]
    assert cites == []


def test_the_results_table_agrees_with_its_episodes():
    """results/redraw.py --check recomputes every run's frames to -15 and +18 from its
    episode file and fails where the table says otherwise."""
    result = subprocess.run([sys.executable, str(ROOT / "results" / "redraw.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "runs agree with their episodes" in result.stdout


def load_redraw():
    spec = importlib.util.spec_from_file_location("redraw", ROOT / "results" / "redraw.py")
    redraw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(redraw)
    return redraw


def test_a_row_whose_figures_its_episodes_do_not_give_is_refused_by_id_and_column():
    """A tampered row (a run made to reach +18 a million frames sooner than its episodes
    say) fails the check, which names the run and the column."""
    redraw = load_redraw()
    runs = redraw.read_runs()
    assert redraw.disagreements(runs) == []
    solved = runs.index[runs["frames_to_plus18"].notna()][0]
    runs.loc[solved, "frames_to_plus18"] -= 1_000_000
    problems = redraw.disagreements(runs)
    assert len(problems) == 1
    assert runs.loc[solved, "id"] in problems[0] and "frames_to_plus18" in problems[0]


def test_a_page_that_no_longer_matches_the_table_is_stale():
    """--check fails on a page written before a row changed, and names that page only."""
    redraw = load_redraw()
    runs = redraw.read_runs()
    first_r2d2 = runs.index[runs["algorithm"] == "r2d2"][0]
    runs.loc[first_r2d2, "note"] = "a note the page does not have"
    assert redraw.stale(runs) == ["r2d2.md"]
