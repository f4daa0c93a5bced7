"""The user's guide stays a guide, and every link in it and in docs/ leads somewhere."""
from __future__ import annotations

import re
from pathlib import Path

from tests import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for _, line in _prose(path) if line.startswith("#")}


def broken_links(pages: list[Path]) -> list[str]:
    broken = []
    for page in pages:
        for n, line in _prose(page):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http(s), mailto: not followed offline
                file_part, _, anchor = target.partition("#")
                dest = (page.parent / file_part).resolve() if file_part else page
                where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name}:{n}: {target}"
                if not dest.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{where} (no heading #{anchor})")
    return broken


def test_every_link_in_the_readme_and_docs_resolves():
    assert broken_links(PAGES) == []


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path):
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# B\n## Two words — here\n")
    page.write_text("[ok](b.md#two-words--here) [gone](c.md) [no anchor](b.md#three)\n```\n[in code](x.md)\n```\n")
    found = [b.split(": ", 1)[1] for b in broken_links([page])]
    assert found == ["c.md (no such file)", "b.md#three (no heading #three)"]


def test_the_readme_is_a_users_guide_of_at_most_350_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 350


def test_the_ci_page_gives_each_tier_a_budget_the_test_run_reads():
    from tests.conftest import tier_budgets

    budgets = tier_budgets((ROOT / "docs" / "CI.md").read_text())
    assert set(budgets) == {"unit", "integration"} and all(m > 0 for m in budgets.values())
    assert tier_budgets("| integration (real processes) | 21.5 min | x |") == {"integration": 21.5}
