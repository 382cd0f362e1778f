"""The end of `make test`: a table of its phases with seconds each, the ten
slowest ctest and pytest tests, and the time budget check.

    python tests/make_test_report.py TIMES CTEST_JUNIT PYTEST_JUNIT BUDGET_MINUTES

Exits 1 when the phases took longer than BUDGET_MINUTES in all (so the suite
cannot drift past the budget without anyone noticing).
"""

import os
import sys
import xml.etree.ElementTree as ET


def slowest(path, n=10):
    if not os.path.exists(path):
        return []
    cases = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = tc.get("name", "?")
        cls = tc.get("classname", "")
        full = f"{cls}::{name}" if cls and cls != name else name
        try:
            cases.append((float(tc.get("time", "0")), full))
        except ValueError:
            pass
    cases.sort(reverse=True)
    return cases[:n], len(cases)


def main():
    times, ctest_xml, pytest_xml, budget = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    phases = []
    with open(times) as f:
        for line in f:
            name, secs, status = line.rstrip("\n").split("\t")
            phases.append((name, float(secs), status))
    total = sum(s for _, s, _ in phases)
    print("\nmake test: phases")
    width = max([len(p[0]) for p in phases] + [5])
    for name, secs, status in phases:
        print(f"  {name:<{width}}  {secs:8.1f} s  {status}")
    print(f"  {'total':<{width}}  {total:8.1f} s  ({total / 60:.1f} min; budget {budget:g} min)")
    cached = [name for name, _, status in phases if status.startswith("cached")]
    if cached:
        print(f"  ({len(cached)} phase(s) cached: they passed before with exactly these inputs; "
              "TEST_CACHE=0 reruns them; the slowest tests below are from that run)")
    for label, path in (("ctest", ctest_xml), ("pytest", pytest_xml)):
        got = slowest(path)
        if not got:
            continue
        cases, count = got
        print(f"\nmake test: the ten slowest of {count} {label} tests")
        for secs, name in cases:
            print(f"  {secs:8.2f} s  {name}")
    if total > budget * 60:
        print(f"\nmake test: FAILED the time budget: {total / 60:.1f} min > {budget:g} min "
              f"(TEST_BUDGET_MIN in the Makefile); find the phase or tests that grew above")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
