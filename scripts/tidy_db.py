#!/usr/bin/env python3
"""The compilation database and the file lists scripts/tidy.sh gives clang-tidy.

Usage: tidy_db.py BUILD/compile_commands.json OUT_DIR < sources ("hot PATH" or "cold PATH" a line)

Writes OUT_DIR/compile_commands.json, OUT_DIR/cold_files (the cold sources checked one by one),
OUT_DIR/batched_count and OUT_DIR/batches/NAME/{batch.cpp,.clang-tidy}.

- A unity build (GPUSLICE_UNITY_BUILD) lists its batches, not its sources, in
  compile_commands.json: each batch's command is given to every source it includes.
- A source compiled twice with commands that differ only in -D options and the output file, where
  both preprocess to the same text (the hooks in libgpuslice.so and in libgpuslice-ab.so, whose
  switch only two of them read), is checked once: clang-tidy runs every command a file has, and
  the second run would check the same code again.
- The cold sources (no analyzer) of each unity batch are checked as that batch, one parse of the
  gRPC, protobuf and JSON headers for all of them instead of one each (a fifth of the CPU time).
  The batch file includes the sources by path, so every diagnostic names the source and line, and
  the batch's .clang-tidy is the configuration clang-tidy gives its sources one by one (their
  folder's, dumped in full). A source is batched only when the build compiles it once, in that
  batch, and its path passes the configuration's header filter (an included file's diagnostics
  are shown only then); the others are checked alone, as before.
"""
import collections
import json
import os
import re
import shlex
import subprocess
import sys


def command_of(entry):
    return entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])


def with_file(entry, path):
    """entry's command compiling `path` instead of entry["file"]."""
    new = dict(entry, file=path)
    if "arguments" in entry:
        new["arguments"] = [path if a == entry["file"] else a for a in entry["arguments"]]
    else:
        new["command"] = entry["command"].replace(entry["file"], path)
    return new


def without_output_and_defines(args):
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "-D"):
            skip = True
        elif not a.startswith("-D"):
            kept.append(a)
    return kept


def preprocessed(entry):
    args, out = [], False
    for a in command_of(entry):
        if out:
            out = False
        elif a == "-o":
            out = True
        else:
            args.append(a)
    result = subprocess.run(args + ["-E", "-P", "-o", "-"], cwd=entry["directory"],
                            capture_output=True, check=False)
    return result.stdout if result.returncode == 0 else None


def deduplicate(entries, checked):
    by_file = collections.defaultdict(list)
    for e in entries:
        by_file[e["file"]].append(e)
    kept = []
    for file, group in by_file.items():
        distinct = []  # (flags without -D/-o, preprocessed text)
        for e in group:
            key = without_output_and_defines(command_of(e)[1:])
            text = preprocessed(e) if len(group) > 1 and file in checked else None
            # A command that does not preprocess keeps its run (text None is never a duplicate).
            if text is not None and (key, text) in distinct:
                continue
            distinct.append((key, text))
            kept.append(e)
    return kept


tidy_configs = {}


def tidy_config(source):
    """The configuration clang-tidy uses for `source`, in full (no InheritParentConfig)."""
    folder = os.path.dirname(source)
    if folder not in tidy_configs:
        tidy_configs[folder] = subprocess.run(["clang-tidy", "--dump-config", source],
                                              capture_output=True, text=True, check=True).stdout
    return tidy_configs[folder]


def header_filter(config):
    match = re.search(r"^HeaderFilterRegex:\s*'(.*)'\s*$", config, re.M)
    return match.group(1) if match else None


def main():
    database, out = sys.argv[1], sys.argv[2]
    kinds = collections.defaultdict(set)
    for line in sys.stdin:
        if line.strip():
            kind, path = line.split(maxsplit=1)
            kinds[kind].add(os.path.abspath(path.strip()))
    cold = kinds["cold"]
    entries, unity = [], []
    for e in json.load(open(database)):
        if "/Unity/unity_" not in e["file"]:
            entries.append(e)
            continue
        sources = re.findall(r'^#include "([^"]+)"', open(e["file"]).read(), re.M)
        unity.append((e, sources))
        entries.extend(with_file(e, s) for s in sources)
    entries = deduplicate(entries, kinds["hot"] | cold)
    compiled = collections.Counter(e["file"] for e in entries)

    batched = set()
    os.makedirs(os.path.join(out, "batches"), exist_ok=True)
    for e, sources in unity:
        if not sources or any(s not in cold or compiled[s] != 1 for s in sources):
            continue
        configs = {tidy_config(s) for s in sources}
        if len(configs) != 1:
            continue
        config = configs.pop()
        pattern = header_filter(config)
        if not pattern or not all(re.search(pattern, s) for s in sources):
            continue
        target = os.path.basename(os.path.dirname(os.path.dirname(e["file"]))).removesuffix(".dir")
        name = f"{target}-{os.path.basename(e['file']).split('_cxx')[0]}"
        folder = os.path.join(os.path.abspath(out), "batches", name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, ".clang-tidy"), "w") as f:
            f.write(config)
        batch = os.path.join(folder, "batch.cpp")
        with open(batch, "w") as f:
            f.write("// scripts/tidy_db.py: the sources of one unity batch, checked in one parse.\n")
            for s in sources:
                f.write(f'#include "{s}"  // NOLINT(bugprone-suspicious-include)\n')
        entries.append(with_file(e, batch))
        batched.update(sources)

    json.dump(entries, open(os.path.join(out, "compile_commands.json"), "w"), indent=1)
    alone = sorted(os.path.relpath(s) for s in cold - batched)
    with open(os.path.join(out, "cold_files"), "w") as f:
        f.write("".join(s + "\n" for s in alone))
    with open(os.path.join(out, "batched_count"), "w") as f:
        f.write(f"{len(batched)}\n")


if __name__ == "__main__":
    main()
