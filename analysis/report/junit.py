"""`report/junit.xml`: one test case per SLO verdict, for CI systems that read JUnit XML (GitLab, Jenkins, GitHub
Actions' test reporters). FAIL is a <failure>, INCONCLUSIVE is <skipped> with the samples still needed, PASS is a
plain test case; an INVALID run adds one failing case with its reasons."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from tailrace.contract.summary import RunSummary, SloVerdict


def _measured(v: SloVerdict) -> str:
    if v.measured is None:
        return "no measurement"
    if v.metric not in ("error_rate", "accuracy"):  # latency, ttft, tpot, itl, e2e: milliseconds
        ci = f" [{v.ci_low:.3g}, {v.ci_high:.3g}]" if v.ci_low is not None and v.ci_high is not None else ""
        return f"measured {v.measured:.3g} ms{ci}"
    ci = f" [{v.ci_low:.3%}, {v.ci_high:.3%}]" if v.ci_low is not None and v.ci_high is not None else ""
    return f"measured {v.measured:.3%}{ci}"


def junit_xml(summary: RunSummary) -> str:
    """The JUnit XML document of a run's SLO verdicts (and validity)."""
    verdicts = summary.slos
    suite = ET.Element("testsuite", name=f"tailrace {summary.profile}", tests=str(len(verdicts)),
                       failures=str(sum(v.verdict == "FAIL" for v in verdicts)),
                       skipped=str(sum(v.verdict == "INCONCLUSIVE" for v in verdicts)), errors="0")
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="run_id", value=summary.run_id)
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", classname=f"{summary.profile}.{v.endpoint}.{v.region}",
                             name=v.description)
        detail = f"{v.description} for {v.endpoint} / {v.region}: {_measured(v)}, n = {v.n}"
        if v.verdict == "FAIL":
            ET.SubElement(case, "failure", message=f"FAIL: {detail}", type="SLO").text = detail
        elif v.verdict == "INCONCLUSIVE":
            why = v.reason or (f"needs ~{v.more_samples_needed:,} more samples to decide"
                               if v.more_samples_needed else "too close to the threshold to decide")
            ET.SubElement(case, "skipped", message=f"INCONCLUSIVE: {why}").text = detail
    if not summary.valid:
        suite.set("tests", str(len(verdicts) + 1))
        suite.set("failures", str(int(suite.get("failures") or 0) + 1))
        case = ET.SubElement(suite, "testcase", classname=f"{summary.profile}.run", name="run is valid")
        reasons = "; ".join(summary.invalid_reasons)
        ET.SubElement(case, "failure", message=f"INVALID: {reasons}", type="INVALID").text = reasons
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
