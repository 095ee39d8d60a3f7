# Sourced by run_cli_tests.sh: every citation of the user docs resolves (issue 14 item 13). Messages and comments
# cite `api.md §N` and `format.md §N[.M]`; each must name a section heading of docs/api.md / docs/format.md, and
# nothing may point at documents users do not have (shared/docs).
if out="$(cd "$ROOT" && "$PY" - <<'PYEOF'
import pathlib, re, subprocess, sys
files = subprocess.run(["git", "ls-files", "src", "docs", "tests", "scripts", "README.md"], capture_output=True,
                       text=True, check=True).stdout.split()
heads = {}
for doc in ("api", "format"):
    text = pathlib.Path(f"docs/{doc}.md").read_text()
    heads[doc] = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.M))
bad = []
for f in files:
    if f == "tests/cli/t_docs.sh":  # this check names what it looks for
        continue
    try:
        text = pathlib.Path(f).read_text()
    except (UnicodeDecodeError, FileNotFoundError):
        continue
    if "shared/docs" in text:
        bad.append(f"{f}: cites shared/docs")
    for doc, sec in re.findall(r"\b(api|format)\.md\W{0,3}§(\d+(?:\.\d+)?)", text):
        if sec not in heads[doc] and sec.split(".")[0] not in heads[doc]:
            bad.append(f"{f}: {doc}.md §{sec} is not a section")
    if re.search(r"\bserver\.md\b", text):
        bad.append(f"{f}: cites server.md")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PYEOF
)"; then pass "every api.md/format.md citation names a section; no shared/docs citation"
else fail "doc citations" "$out"; fi
