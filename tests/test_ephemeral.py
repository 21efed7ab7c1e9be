"""is_ephemeral: which shell commands only look, so that their old results may be marked stale.

The rule (reference §5.3): stricter than the reference is fine, laxer is a bug. Every ``False`` row
below that says "writes" or "runs" was checked on bash (the command really writes a file or runs
another program), except the gawk-only ones: they follow gawk's manual (the test box has mawk).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_magic.stores.trim import is_ephemeral

# A failing example makes hypothesis import mypy_extensions, whose DeprecationWarning (an error here)
# would turn the failure report into an INTERNALERROR.
pytestmark = pytest.mark.filterwarnings("ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning")

GLANCES = [
    ("git status", "the commonest glance"),
    ("git status --porcelain && git diff --stat", "a list of glances"),
    ("git log --oneline -5", ""),
    ("git show HEAD:README.md", ""),
    ("git diff HEAD~1 -- src/", ""),
    ("git rev-parse --abbrev-ref HEAD", ""),
    ("git stash list", ""),
    ("git worktree list", ""),
    ("git config --get user.name", ""),
    ("git branch", "lists"),
    ("git branch -a", "lists"),
    ("git branch --show-current", ""),
    ("git branch --list 'feature/*'", "a pattern after --list reads"),
    ("git remote -v", "lists"),
    ("git remote show origin", ""),
    ("git symbolic-ref HEAD", "one operand reads"),
    ("git hash-object README.md", "without -w it only hashes"),
    ("ls -la", ""),
    ("ll", ""),
    ("pwd", ""),
    ("df -h", ""),
    ("du -sh .", ""),
    ("cat README.md | head -n 20", "a pipeline of glances"),
    ("grep -rn TODO src | wc -l", ""),
    ("rg -n 'def main' src", ""),
    ("find . -name '*.py' -type f", ""),
    ("find . \\( -name a -o -name b \\) -print", "escaped parentheses are find's, not a subshell"),
    ("tree -L 2", ""),
    ("wc -l src/*.py", ""),
    ("stat pyproject.toml", ""),
    ("file image.png", ""),
    ("echo hello", ""),
    ("ps aux | grep python", ""),
    ("pgrep -f jupyter", ""),
    ("ss -tlnp", "lists sockets"),
    ("docker ps -a", ""),
    ("kubectl get pods -o wide", ""),
    ("systemctl status nginx", ""),
    ("uname -a", ""),
    ("env", "bare env prints"),
    ("hostname", "bare hostname prints"),
    ("date +%s", "a format reads"),
    ("date -d yesterday +%F", "-d reads a date, it does not set one"),
    ("command -v python3", ""),
    ("type -a python3", ""),
    ("which python3", ""),
    ("sed -n '1,20p' notes.md", "prints lines"),
    ("sed 's/foo/bar/g' notes.md", "substitutes on stdout only"),
    ("sed -n '$p' notes.md", ""),
    ("sed --sandbox 's/a/b/' notes.md", "sed itself refuses e, w and r"),
    ("awk '{print $1}' data.txt", ""),
    ("awk -F: '{print $1}' /etc/passwd", ""),
    ("sort -u names.txt", ""),
    ("uniq -c names.txt", "one operand: reads"),
    ("sort names.txt | uniq", "no operand: reads stdin"),
    ("jq '.name' package.json", ""),
    ("ls 2>&1", "a descriptor redirect writes nothing"),
    ("ls >/dev/null", ""),
    ("ls 2> /dev/null | head", ""),
    ("ls &>/dev/null", ""),
    ("echo done >&2", "to stderr"),
    ("git status\ngit log -1", "newline-separated glances"),
    ("  git status  ", "surrounding whitespace"),
    ("LS -LA", "uppercase: still only a listing (or command not found)"),
    ("GIT STATUS", ""),
    ("echo ${HOME}", "a plain parameter expansion"),
    ("ls *.py", "a glob is harmless where no option can write"),
    ("cat $HOME/.bashrc", "so is a variable"),
    ("git show HEAD~1", ""),
]

NOT_GLANCES = [
    # substitution and code from elsewhere
    ("echo $(rm -rf x)", "command substitution runs a command"),
    ("echo `rm -rf x`", "backticks run a command"),
    ("diff <(ls a) <(ls b)", "process substitution runs commands"),
    ("echo $((1+1))", "arithmetic may run a substitution held in a variable"),
    ("echo ${X@P}", "prompt expansion runs a $(…) held in X"),
    ("ls ${HOME:X}", "the offset is arithmetic: X='a[$(cmd)]' runs cmd"),
    ("eval ls", ""),
    ("exec ls", ""),
    ("source env.sh", ""),
    (". ./env.sh", ""),
    ("FOO=1 ls", "a leading assignment (PAGER=…, LD_PRELOAD=…) can make a glance run anything"),
    # redirects
    ("ls > out.txt", "writes"),
    ("ls >> out.txt", "appends"),
    ("ls 2>err.txt", "writes stderr to a file"),
    ("wc -l < file.txt", "an input redirect: refused, stricter than needed"),
    ("echo hi >&2file", "writes the file 2file"),
    ("ls >/dev/null2", "writes the file /dev/null2"),
    ("cat <<EOF\nx\nEOF", "here-documents are refused"),
    # background, subshells, functions
    ("sleep 100 &", "a background job outlives the glance"),
    ("ls &", ""),
    ("ls |& cat", ""),
    ("(rm -rf x)", "a subshell"),
    ("ls () ( touch pwned ); ls", "defines ls as a function, then runs it"),
    # one mutating piece spoils the list
    ("ls | rm -rf x", ""),
    ("ls && rm -rf x", ""),
    ("ls || touch x", ""),
    ("ls; rm x", ""),
    ("git status\nrm -rf build", "a newline separates commands"),
    ("echo 'a; rm -rf x'", "separators are not read inside quotes: refused, stricter than needed"),
    ("ls;", "an empty piece"),
    # xargs, find, tee
    ("find . -name '*.pyc' | xargs rm", ""),
    ("find . -exec rm {} \\;", ""),
    ("find . -execdir rm {} +", ""),
    ("find . -delete", ""),
    ("find . -fprint out.txt", "writes the list to a file"),
    ("find . -fls out.txt", ""),
    ("find . -ok rm {} \\;", ""),
    ('find . "-delete"', "the shell removes the quotes: find still deletes"),
    ("find . \\-delete", "the shell removes the backslash"),
    ("ls | tee out.txt", ""),
    # sed
    ("sed -i 's/a/b/' f", "edits in place"),
    ("sed -ni 's/a/b/p' f", "-i inside a cluster"),
    ("sed --in-place 's/a/b/' f", ""),
    ("sed --in=.bak 's/a/b/' f", "getopt accepts --in for --in-place"),
    ("sed \"-i\" 's/a/b/' f", "quoted option"),
    ("sed 'w out.txt' f", "the w command writes"),
    ("sed -n '/x/w out.txt' f", "w after a regex address"),
    ("sed '1w out.txt' f", "w after a line address"),
    ("sed 's/a/b/w out.txt' f", "the s///w flag writes"),
    ("sed -n 's/a/b/w p' f", "writes the file p (which also reads like the p command)"),
    ("sed -n 'w p' f", "the w command, with a file named like a command"),
    ("sed 's/.*/touch pwned/e' f", "the s///e flag runs the pattern space"),
    ("sed e f", "the e command runs each line"),
    ("sed -f script.sed f", "a script file we cannot see"),
    ("sed -e 'w out' -e --sandbox f", "--sandbox here is a script, not the option; w truncates out at compile time"),
    # sort, uniq, awk
    ("sort -o out.txt in.txt", ""),
    ("sort --out=out.txt in.txt", "getopt accepts --out for --output"),
    ('sort "-o" out in', ""),
    ("sort --compress-program=sh in.txt", "runs a program"),
    ("uniq in.txt out.txt", "the second operand is written"),
    ("uniq - out.txt", "stdin in, a file out"),
    ("date -d yesterday -s now", "-s after an option that took its argument"),
    ("awk 'BEGIN{system(\"rm x\")}'", ""),
    ("awk '{print > \"f\"}' x", ""),
    ("awk -f prog.awk data", "a program file we cannot see"),
    ("awk -i inplace '{print}' f", "gawk edits in place"),
    ('awk \'BEGIN{f="system"; @f("rm x")}\'', "gawk's indirect call"),
    ("awk '@include \"lib.awk\"' data", "gawk runs another file (gawk rows: documented, not run here)"),
    ("awk -v f=system 'BEGIN{@f(\"rm x\")}'", "gawk's indirect call of a built-in named in a variable"),
    # git
    ("git branch -D main", ""),
    ("git branch -d old", ""),
    ("git branch -m new", ""),
    ("git branch -M new", ""),
    ("git branch newname", "creates a branch"),
    ("git remote add origin https://example.com/x.git", ""),
    ("git push --force", ""),
    ("git reset --hard", ""),
    ("git diff --output=patch.diff", "writes the diff to a file"),
    ('git diff "--output=patch.diff"', "quoted option"),
    ("git hash-object -w README.md", "writes an object"),
    ("git reflog expire --expire=now --all", "deletes reflog entries"),
    ("git symbolic-ref HEAD refs/heads/x", "moves HEAD"),
    ("git -c core.pager='sh -c x' log", "global options are refused"),
    ("GIT BRANCH -D main", ""),
    # commands that read with no argument and change things with one
    ("env rm -rf x", "env runs its argument"),
    ("hostname newname", "sets the host name"),
    ("date -s '2020-01-01'", "sets the clock"),
    ("date -us '2020-01-01'", "-s inside a cluster"),
    ("date 010112002025", "an operand sets the clock"),
    ("tree -o out.txt", "writes a file"),
    ("tree -R", "writes 00Tree.html in every folder"),
    ("file -C -m magic", "compiles a magic file"),
    ("ss -K dst 10.0.0.1", "kills sockets"),
    ("rg --pre sh pattern", "runs a preprocessor on every file"),
    ("SED -I 's/a/b/' f", ""),
    # words that expand into options the text does not show
    ("sort $'-o' out in", "ANSI-C quoting: the shell passes -o"),
    ("find . -{delete,print}", "brace expansion: -delete -print"),
    ("find . $X", "X=-delete in the environment"),
    ("find . *", "a file named -delete in the folder"),
    ("sort *", "a file named -o in the folder"),
    ("git branch --list $X", "X='-D main'"),
    # reference parity: these words are refused anywhere, even where they are harmless
    ("grep -rn source .", "the reference refuses source anywhere"),
    ("grep -w eval notes.md", ""),
    ("cat tee.log", ""),
    ("echo xargs", ""),
    # not commands at all
    ("", ""),
    ("   ", ""),
    ("\n", ""),
    ("rm -rf build", "not a glance verb"),
    ("python -c 'print(1)'", ""),
    ("cd src && ls", "cd changes the shell's directory for later calls"),
]


@pytest.mark.parametrize(("cmd", "why"), GLANCES, ids=[c for c, _ in GLANCES])
def test_glance(cmd: str, why: str) -> None:
    assert is_ephemeral(cmd), why


@pytest.mark.parametrize(("cmd", "why"), NOT_GLANCES, ids=[repr(c) for c, _ in NOT_GLANCES])
def test_not_a_glance(cmd: str, why: str) -> None:
    assert not is_ephemeral(cmd), why


def test_the_table_is_large_and_adversarial() -> None:
    assert len(GLANCES) + len(NOT_GLANCES) >= 60
    assert len(NOT_GLANCES) > len(GLANCES)


SEPARATORS = (" && ", " || ", "; ", " | ", "\n")


@settings(max_examples=300, deadline=None, database=None)
@given(
    glance=st.sampled_from([c for c, _ in GLANCES]),
    other=st.sampled_from([c for c, _ in NOT_GLANCES if c.strip()]),
    sep=st.sampled_from(SEPARATORS),
    first=st.booleans(),
)
def test_one_non_glance_piece_spoils_any_list(glance: str, other: str, sep: str, first: bool) -> None:
    cmd = other + sep + glance if first else glance + sep + other
    assert not is_ephemeral(cmd)


@settings(max_examples=300, deadline=None, database=None)
@given(
    pieces=st.lists(st.sampled_from([c for c, _ in GLANCES if "\n" not in c]), min_size=2, max_size=4),
    sep=st.sampled_from(SEPARATORS),
)
def test_glances_joined_stay_glances(pieces: list[str], sep: str) -> None:
    assert is_ephemeral(sep.join(pieces))


VERBS = ("ls", "git", "status", "branch", "remote", "symbolic-ref", "sed", "awk", "find", "sort", "uniq", "date")
VERBS += ("tree", "file", "ss", "rg", "env", "hostname", "type", "command", "grep", "cat", "echo")
WORDS = ("-", "--", "-e", "-n", "-i", "-s", "-o", "-f", "-v", "-F", "-d", "-w", "--out", "--set=x", "p", "w p")
WORDS += ("s/a/b/", "'", '"', "\\", "$", "$X", "*", "{a,b}", "(", ")", ";", "|", "&", "&&", ">", "2>&1", "\n")


@settings(max_examples=1000, deadline=None, database=None)
@given(st.lists(st.sampled_from(VERBS + WORDS), max_size=8), st.text(max_size=12))
def test_never_raises(words: list[str], noise: str) -> None:
    """Any mix of verbs, options and shell punctuation gets an answer, never an exception."""
    assert is_ephemeral(" ".join(words)) in (True, False)
    assert is_ephemeral(" ".join(words) + noise) in (True, False)
