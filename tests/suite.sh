#!/bin/sh
# tests/suite.sh — runs every suite of `make test`, each even when one before
# it failed, then one combined count.
#
#   sh tests/suite.sh NAME 'COMMAND' [NAME 'COMMAND']...
#
# Each COMMAND runs through sh, its output shown as it comes. Its count is its
# last "N passed, N failed, N skipped" line (tests/run.sh) or pytest's
# summary ("3 passed, 1 skipped in 2.01s"); a command without either counts
# as one test, passed if it exited 0. A command that exits non-zero with no
# failure in its count (a build error, pytest's own error) adds one failure.
# The line before the last has each suite's count and wall time; the last
# line is the sum alone, "N passed, N failed, N skipped" (CI reads it); the
# exit status is 1 if anything failed.
set -u

if [ $# -eq 0 ] || [ $(($# % 2)) -ne 0 ]; then
	echo "usage: sh tests/suite.sh NAME 'COMMAND' [NAME 'COMMAND']..." >&2
	exit 2
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/wsync-suite.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

# count FILE RC: prints "passed failed skipped" for one suite's output
count() {
	awk -v rc="$2" '
	/^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$/ {
		p = $1; f = $3; s = $5; got = 1; next
	}
	# pytest: "1 failed, 200 passed, 3 skipped, 2 errors in 12.34s" (with
	# or without the surrounding "=")
	/(passed|failed|skipped|error|errors|xfailed|xpassed|no tests ran).* in [0-9.]+s/ {
		line = $0
		gsub(/=/, "", line)
		sub(/ in [0-9.]+s.*$/, "", line)
		n = split(line, part, ", ")
		p = f = s = 0
		for (i = 1; i <= n; i++) {
			split(part[i], w, " ")
			if (w[2] == "passed" || w[2] == "xpassed") p += w[1]
			else if (w[2] == "failed" || w[2] == "error" || w[2] == "errors") f += w[1]
			else if (w[2] == "skipped" || w[2] == "xfailed") s += w[1]
		}
		got = 1
	}
	END {
		if (!got) { p = rc == 0 ? 1 : 0; f = rc == 0 ? 0 : 1; s = 0 }
		else if (rc != 0 && f == 0) f = 1
		print p + 0, f + 0, s + 0
	}' "$1"
}

P=0 F=0 S=0
summary=
while [ $# -gt 0 ]; do
	name=$1 cmd=$2
	shift 2
	echo "== $name"
	t0=$(date +%s)
	{ sh -c "$cmd" 2>&1; echo $? >"$TMP/rc"; } | tee "$TMP/out"
	rc=$(cat "$TMP/rc")
	took=$(($(date +%s) - t0))
	set -- $(count "$TMP/out" "$rc") "$@"
	P=$((P + $1)) F=$((F + $2)) S=$((S + $3))
	summary="$summary${summary:+; }$name: $1 passed, $2 failed, $3 skipped ($took s)"
	shift 3
done

echo "== $summary"
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]
