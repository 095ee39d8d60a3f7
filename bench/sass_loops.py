#!/usr/bin/env python3
"""The loops of each kernel in a `cuobjdump -sass` listing, with their instruction mix.

    sass_loops.py LISTING [NAME_SUBSTRING] [--around OPCODE]

A loop is the range from a backward branch's target to the branch. With --around HMMA (say), prints instead
the mix of the instructions from 0x600 bytes before the first such instruction to the last one: the decode
body around a kernel's mma chain.
"""
import collections
import re
import sys


def kernels(text):
    for f in re.split(r"\n\s*Function : ", text)[1:]:
        name = f.split("\n", 1)[0].strip()
        ins = []
        for line in f.split("\n"):
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2).strip()))
        yield name, ins


def opcode(op):
    return re.sub(r"^@!?U?P\w+\s+", "", op).split()[0]


def mix(body, top=14):
    c = collections.Counter(opcode(o) for _, o in body)
    return ", ".join(f"{k} {v}" for k, v in c.most_common(top))


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    want = argv[2] if len(argv) > 2 and not argv[2].startswith("--") else ""
    around = argv[argv.index("--around") + 1] if "--around" in argv else None
    for name, ins in kernels(open(argv[1]).read()):
        if want not in name:
            continue
        print(f"== {name}: {len(ins)} instructions")
        if around:
            at = [a for a, o in ins if opcode(o).startswith(around)]
            if at:
                body = [(a, o) for a, o in ins if at[0] - 0x600 <= a <= at[-1]]
                print(f"  {len(at)} {around}; {len(body)} instructions around them: {mix(body, 40)}")
            continue
        index = {a: i for i, (a, _) in enumerate(ins)}
        for i, (a, op) in enumerate(ins):
            m = re.search(r"BRA .*?0x([0-9a-f]+)", op)
            if not m:
                continue
            target = int(m.group(1), 16)
            if target < a and target in index:
                body = ins[index[target] : i + 1]
                print(f"  loop {target:#x}..{a:#x}: {len(body)} instructions; {mix(body)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
