"""The benchmarks' writer of docs/BENCHMARKS.md: a partial run replaces the subsections it
measured and keeps the rest, in their order, and nothing outside its section."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_verify import read_section, write_subsections  # noqa: E402

NAMES = ("sweep", "context", "llama.cpp")


def test_a_partial_run_keeps_the_subsections_it_did_not_measure(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\nbefore\n")
    write_subsections(doc, "real", "## header 1", {"sweep": "sweep 1", "llama.cpp": "peer 1"}, NAMES)
    doc.write_text(doc.read_text() + "\nafter\n")

    write_subsections(doc, "real", "## header 2", {"context": "context 2", "llama.cpp": "peer 2"}, NAMES)
    text = doc.read_text()
    section = read_section(text, "real")
    assert section.startswith("## header 2\n")
    assert [read_section(section, f"real/{name}") for name in NAMES] == ["sweep 1", "context 2", "peer 2"]
    assert section.index("sweep 1") < section.index("context 2") < section.index("peer 2")
    assert text.startswith("# Benchmarks\n\nbefore\n") and text.endswith("\nafter\n")
    assert text.count("<!-- real:begin -->") == 1 and "peer 1" not in text
