"""`report/junit.xml`: one test case per SLO verdict, for CI systems that read JUnit XML (GitLab, Jenkins, GitHub
Actions' test reporters). FAIL is a <failure>, INCONCLUSIVE is <skipped> with the samples still needed, PASS is a
plain test case; an INVALID run adds one failing case with its reasons."""
from __future__ import annotations

import xml.etree.ElementTree as ET


def _measured(v: dict) -> str:
    if v["measured"] is None:
        return "no measurement"
    if v["metric"] != "error_rate":  # latency, ttft, tpot, itl, e2e: milliseconds
        ci = f" [{v['ci_low']:.3g}, {v['ci_high']:.3g}]" if v.get("ci_low") is not None else ""
        return f"measured {v['measured']:.3g} ms{ci}"
    return f"measured {v['measured']:.3%} [{v['ci_low']:.3%}, {v['ci_high']:.3%}]"


def junit_xml(summary: dict) -> str:
    """The JUnit XML document of a run's SLO verdicts (and validity)."""
    verdicts = summary.get("slos") or []
    suite = ET.Element("testsuite", name=f"tailrace {summary['profile']}", tests=str(len(verdicts)),
                       failures=str(sum(v["verdict"] == "FAIL" for v in verdicts)),
                       skipped=str(sum(v["verdict"] == "INCONCLUSIVE" for v in verdicts)), errors="0")
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="run_id", value=str(summary["run_id"]))
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", classname=f"{summary['profile']}.{v['endpoint']}.{v['region']}",
                             name=v["description"])
        detail = f"{v['description']} for {v['endpoint']} / {v['region']}: {_measured(v)}, n = {v['n']}"
        if v["verdict"] == "FAIL":
            ET.SubElement(case, "failure", message=f"FAIL: {detail}", type="SLO").text = detail
        elif v["verdict"] == "INCONCLUSIVE":
            why = v.get("reason") or (f"needs ~{v['more_samples_needed']:,} more samples to decide"
                                      if v.get("more_samples_needed") else "too close to the threshold to decide")
            ET.SubElement(case, "skipped", message=f"INCONCLUSIVE: {why}").text = detail
    if not summary.get("valid", True):
        suite.set("tests", str(len(verdicts) + 1))
        suite.set("failures", str(int(suite.get("failures")) + 1))
        case = ET.SubElement(suite, "testcase", classname=f"{summary['profile']}.run", name="run is valid")
        reasons = "; ".join(summary.get("invalid_reasons") or [])
        ET.SubElement(case, "failure", message=f"INVALID: {reasons}", type="INVALID").text = reasons
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
