#!/usr/bin/python3
"""The chart's values.schema.json accepts exactly the daemon flag values gpuslice-node accepts.

For each value the DaemonSet passes as a flag, sample values (valid and invalid) are checked both
ways: against the schema of that value, and by `gpuslice-node serve --FLAG=VALUE --help`, which
parses the flag first and exits 0 only if the daemon takes it. A value the schema lets through but
the daemon refuses would render and then crash-loop on every node; the reverse would refuse a
working setting. Not compared: what a JSON schema cannot say (a fractional size that is not a whole
number of bytes, sizes above 2^64).

usage: check_schema_agrees.py --schema values.schema.json --daemon build/bin/gpuslice-node
"""
import argparse
import json
import subprocess
import sys

import jsonschema

SAMPLES = {
    # values path: (flag, list of samples, how a sample becomes the flag's text)
    ("node", "vramUnit"): ("vram-unit", ["auto", "Auto", "auto1", "1Mi", "256Mi", "1Gi", "1.5Gi", "1GiB", "1gib", "1mi", "2048", "1M",
                                         "1Kb", "1b", "0.5Gi", "bogus", "0", "0Mi", "0.0Gi", "-1Mi", "+1Mi",
                                         "1 Mi", "Mi", "1Xi", "1.Mi", ".5Gi", "", "1Mii"], str),
    ("node", "scanInterval"): ("scan-interval", ["1s", "500ms", "2m", "10", "0s", "0", "1h", "1.5s", "-1s",
                                                 "999999999ms", "1000000000s", "s", "", "1S"], str),
    ("node", "replicas"): ("replicas", [1, 4, 9999, 0, 10000, -1], str),
    ("node", "gcGracePeriod"): ("gc-grace-period", ["5m", "0", "30s", "1500ms", "00", "0s", "1h", "-1m", ""], str),
    ("node", "deviceListStrategy"): ("device-list-strategy", ["envvar", "cdi", "CDI", "volume-mounts", ""], str),
    ("node", "cdiKind"): ("cdi-kind", ["nvidia.com/gpu", "example.com/gpu-1", "nvidia.com", "/gpu", "nvidia.com/",
                                       "a/b/c", "nvidia.com/g pu", ""], str),
    ("node", "placement"): ("placement", ["binpack", "spread", "Binpack", "random", ""], str),
    ("node", "logLevel"): ("log-level", ["error", "warn", "warning", "info", "debug", "trace", "verbose", ""],
                           str),
    ("node", "advertisedResources"): ("resources", [["gpu"], ["gpu", "vram", "cores"], ["vram", "cores"],
                                                    ["memory"], [], ["gpu", "GPU"]], ",".join),
    # The operator's priority policy (the webhook takes the same flags through the same parsers). An
    # empty list or map renders no flag at all. A level in other case (High) differs on purpose: the
    # daemon takes it, the schema keeps to the lowercase levels every document names.
    ("priority", "highNamespaces"): ("priority-high-namespaces",
                                     [["ml-serving"], ["ml-serving", "ops"], ["a" * 63], ["a" * 64], ["Serving"],
                                      ["ml_serving"], ["ml.serving"], ["ops", ""]], ",".join),
    ("priority", "classes"): ("priority-classes",
                              [{"gpu-critical": "high"}, {"gpu-critical": "high", "batch": "low"},
                               {"system-node-critical": "normal"}, {"gpu-critical": "urgent"},
                               {"gpu-critical": ""}],
                              lambda m: ",".join(f"{k}={v}" for k, v in sorted(m.items()))),
    # Port 0 (any free port) differs on purpose: the chart's probes and Service need a fixed one.
    ("node", "port"): ("listen", [1, 9410, 65535, 65536, -1], lambda p: f"127.0.0.1:{p}"),
}


def sub_schema(schema, path):
    for key in path:
        schema = schema["properties"][key]
    return schema


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schema", required=True)
    parser.add_argument("--daemon", required=True)
    args = parser.parse_args()
    schema = json.load(open(args.schema, encoding="utf-8"))
    disagreements, compared = [], 0
    for path, (flag, samples, render) in SAMPLES.items():
        validator = jsonschema.Draft7Validator(sub_schema(schema, path))
        for sample in samples:
            by_schema = validator.is_valid(sample)
            # A clean environment: the daemon's GPUSLICE_* variables would otherwise take part.
            run = subprocess.run([args.daemon, "serve", f"--{flag}={render(sample)}", "--help"],
                                 capture_output=True, text=True, timeout=10, env={"PATH": "/usr/bin:/bin"})
            by_daemon = run.returncode == 0
            compared += 1
            if by_schema != by_daemon:
                disagreements.append(
                    f"{'.'.join(path)}={sample!r}: schema {'accepts' if by_schema else 'rejects'}, "
                    f"gpuslice-node --{flag} {'accepts' if by_daemon else 'rejects'} "
                    f"({run.stderr.strip() or 'exit 0'})")
    for d in disagreements:
        print(f"  ERROR {d}")
    print(f"  {compared} values compared between values.schema.json and gpuslice-node's flags, "
          f"{len(disagreements)} disagreements")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
