#!/usr/bin/env python3
"""Merges the gtest XML files of several runs of one test binary into one, and accounts for runs that
wrote none.

scripts/gpu-check.sh runs test_cuda one suite per process, so that a fault that poisons the CUDA
context (a sticky error such as an illegal address) or a hang costs one suite, not every test after
it. A process that crashed or was killed writes no XML; for such a suite the merged file gets one
failed test case, SUITE.<process>, whose message gives the exit status and the last test the run
started (from the `[ RUN      ]` lines of its output file).

Usage: merge_gtest_xml.py --out merged.xml --runs DIR
  DIR holds, per suite, NAME.rc (the exit status), NAME.out (its output) and, when it wrote one,
  NAME.xml. Prints one line per suite ("SUITE NAME: ..."): its tests, failed and skipped, or how the
  process ended. Exit status 1 when any suite failed or its process did not end cleanly.
"""
import argparse
import os
import re
import sys
import xml.etree.ElementTree as ET


def last_started(out_path):
    try:
        text = open(out_path, errors="replace").read()
    except OSError:
        return None
    runs = re.findall(r"^\[ RUN      \] (\S+)", text, re.M)
    done = set(re.findall(r"^\[\s+(?:OK|FAILED|SKIPPED)\s+\] (\S+)", text, re.M))
    unfinished = [r for r in runs if r not in done]
    return unfinished[-1] if unfinished else (runs[-1] if runs else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", required=True)
    a = ap.parse_args()

    names = sorted({f.rsplit(".", 1)[0] for f in os.listdir(a.runs) if f.endswith((".rc", ".xml"))})
    root = ET.Element("testsuites")
    totals = {"tests": 0, "failures": 0, "disabled": 0, "errors": 0}
    bad = 0
    for name in names:
        base = os.path.join(a.runs, name)
        try:
            rc = int(open(base + ".rc").read().strip() or "-1")
        except (OSError, ValueError):
            rc = -1
        suites = []
        if os.path.exists(base + ".xml"):
            try:
                suites = list(ET.parse(base + ".xml").getroot().iter("testsuite"))
            except ET.ParseError as e:
                print(f"SUITE {name}: unreadable XML ({e})")
        failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
        for s in suites:
            root.append(s)
            for k in totals:
                totals[k] += int(s.get(k, 0))
        if not suites:
            # The process died before writing its XML: one failed case names it.
            ended = {124: "timed out", 137: "killed"}.get(rc, f"exit status {rc}")
            if rc > 128 and rc != 137:
                ended += f" (signal {rc - 128})"
            started = last_started(base + ".out")
            msg = f"SUITE {name}: no XML; the process ended with {ended}; last test started: {started or '-'}"
            s = ET.SubElement(root, "testsuite", name=name, tests="1", failures="1", disabled="0", errors="0")
            c = ET.SubElement(s, "testcase", name="<process>", classname=name, status="run", result="completed")
            ET.SubElement(c, "failure", message=msg).text = msg
            totals["tests"] += 1
            totals["failures"] += 1
            bad += 1
            print(msg)
            continue
        tests = sum(int(s.get("tests", 0)) for s in suites)
        skipped = sum(1 for s in suites for c in s.iter("testcase") if c.get("result") == "skipped")
        line = f"SUITE {name}: {tests} tests, {failed} failed, {skipped} skipped"
        if rc != 0 and failed == 0:
            line += f" (but the process ended with status {rc})"
            bad += 1
        elif failed:
            bad += 1
        print(line)
    for k, v in totals.items():
        root.set(k, str(v))
    # Attribute order as gtest writes it (the summary reads tests, failures, disabled, errors).
    head = " ".join(f'{k}="{totals[k]}"' for k in ("tests", "failures", "disabled", "errors"))
    body = "".join(ET.tostring(s, encoding="unicode") for s in root)
    with open(a.out, "w") as f:
        f.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuites {head} name="AllTests">\n{body}\n</testsuites>\n')
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
