#!/bin/sh
# tests/layering.sh — fails when a folder stops reading from the bottom up.
#
#   sh tests/layering.sh [-o OBJROOT] [-I DIR]... DIR...
#
# Two graphs, each of which must be free of cycles:
#
#  1. includes: an edge H -> G when header H (any *.h directly in one of the
#     DIRs) has `#include "..."` naming header G, also one of the DIRs'
#     headers. The name is looked up the way the compiler does: next to H
#     first, then in each -I DIR in order (pass the build's -I flags).
#
#  2. calls, per DIR: an edge A.c -> B.c when the object of A references a
#     global symbol that the object of B, in the same DIR, defines (nm on
#     OBJROOT/DIR/*.o, default build/obj). Lower files never call up, so a
#     loop means some file calls a file that calls it back.
#
# A cycle is printed as a path that returns to its start, each call edge
# with the symbols that make it; every file of the loop is named. Exit 0
# when both graphs are acyclic, 1 on a cycle, 2 on bad usage or a DIR whose
# objects are not built. Nothing here knows any folder by name.
#
# POSIX sh, awk and nm.
set -u

OBJROOT=build/obj
INCS=
usage() {
	echo "usage: sh tests/layering.sh [-o OBJROOT] [-I DIR]... DIR..." >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	-o) [ $# -ge 2 ] || usage; OBJROOT=$2; shift 2 ;;
	-o*) OBJROOT=${1#-o}; shift ;;
	-I) [ $# -ge 2 ] || usage; INCS="$INCS
$2"; shift 2 ;;
	-I*) INCS="$INCS
${1#-I}"; shift ;;
	--) shift; break ;;
	-*) usage ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || usage

DIRS=$*
ROOT=$(pwd -P)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/layering.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT INT TERM

# The path of existing file $1 relative to the current directory when it
# lies below it, else absolute; .. and symbolic links resolved.
canon() {
	d=$(cd "$(dirname "$1")" 2>/dev/null && pwd -P) || return 1
	p=$d/$(basename "$1")
	case $p in
	"$ROOT"/*) echo "${p#"$ROOT"/}" ;;
	*) echo "$p" ;;
	esac
}

# Reads "from to label" lines; prints every cycle (one per strongly
# connected component: its shortest loop through its first file, then all
# its files) and exits 1 if there is one. $1 says what the graph is.
find_cycles() {
	awk -v what="$1" '
	function strong(v,    n, i, w, list) {
		idx[v] = low[v] = ++counter
		stack[++sp] = v
		onstack[v] = 1
		n = split(adj[v], list, " ")
		for (i = 1; i <= n; i++) {
			w = list[i]
			if (!(w in idx)) {
				strong(w)
				if (low[w] < low[v])
					low[v] = low[w]
			} else if (onstack[w] && idx[w] < low[v]) {
				low[v] = idx[w]
			}
		}
		if (low[v] == idx[v]) {
			ncomp++
			do {
				w = stack[sp--]
				onstack[w] = 0
				comp[w] = ncomp
				size[ncomp]++
			} while (w != v)
		}
	}
	# Breadth-first from start inside its component, back to start.
	function loop_from(start, c,    head, tail, v, n, i, w, list, q, from, seen, path, out) {
		head = 1; tail = 0
		n = split(adj[start], list, " ")
		for (i = 1; i <= n; i++)
			if (comp[list[i]] == c && !(list[i] in seen)) {
				seen[list[i]] = 1; from[list[i]] = start; q[++tail] = list[i]
			}
		while (head <= tail && !(start in seen)) {
			v = q[head++]
			n = split(adj[v], list, " ")
			for (i = 1; i <= n; i++) {
				w = list[i]
				if (comp[w] == c && !(w in seen)) {
					seen[w] = 1; from[w] = v; q[++tail] = w
				}
			}
		}
		# walk back from start to start
		path = start
		v = start
		do {
			path = from[v] SUBSEP path
			v = from[v]
		} while (v != start)
		n = split(path, list, SUBSEP)
		for (i = 1; i < n; i++) {
			out = out sprintf("    %s -> %s", list[i], list[i + 1])
			if (lab[list[i], list[i + 1]] != "")
				out = out "  (" lab[list[i], list[i + 1]] ")"
			out = out "\n"
		}
		return out
	}
	NF >= 2 && $1 != $2 {
		if (!(($1, $2) in lab)) {
			lab[$1, $2] = ""
			nlab[$1, $2] = 0
			adj[$1] = adj[$1] " " $2
		}
		if (NF >= 3 && nlab[$1, $2] < 4) {
			lab[$1, $2] = lab[$1, $2] (nlab[$1, $2] ? ", " : "") $3
			if (++nlab[$1, $2] == 4)
				lab[$1, $2] = lab[$1, $2] ", ..."
		}
		node[$1]; node[$2]
	}
	END {
		for (v in node)
			sorted[++nn] = v
		for (i = 2; i <= nn; i++)          # insertion sort: stable output
			for (j = i; j > 1 && sorted[j - 1] > sorted[j]; j--) {
				t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t
			}
		for (i = 1; i <= nn; i++)
			if (!(sorted[i] in idx))
				strong(sorted[i])
		bad = 0
		for (i = 1; i <= nn; i++) {
			v = sorted[i]
			c = comp[v]
			if (size[c] < 2 || (c in told))
				continue
			told[c] = 1
			bad++
			printf "layering: %s: a loop of %d files:\n", what, size[c]
			printf "%s", loop_from(v, c)
			line = ""
			for (j = 1; j <= nn; j++)
				if (comp[sorted[j]] == c)
					line = line " " sorted[j]
			printf "  every file in it:%s\n", line
		}
		exit bad ? 1 : 0
	}'
}

status=0

# ---- 1. includes among the headers of all DIRs -----------------------------
: >"$TMP/headers"
for dir in "$@"; do
	if [ ! -d "$dir" ]; then
		echo "layering: $dir is not a directory" >&2
		exit 2
	fi
	for h in "$dir"/*.h; do
		[ -f "$h" ] && canon "$h" >>"$TMP/headers"
	done
done
: >"$TMP/includes"
while IFS= read -r h; do
	sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$h" |
	while IFS= read -r name; do
		target=
		for base in "$(dirname "$h")" $INCS; do
			if [ -f "$base/$name" ]; then
				target=$(canon "$base/$name") && break
			fi
		done
		[ -n "$target" ] && grep -qxF "$target" "$TMP/headers" &&
			echo "$h $target"
	done
done <"$TMP/headers" >"$TMP/includes"
find_cycles "#include among the headers of $DIRS" <"$TMP/includes" || status=1

# ---- 2. calls between the .c files of each DIR ------------------------------
for dir in "$@"; do
	objdir=$OBJROOT/${dir%/}
	set -- "$objdir"/*.o
	have_c=$(ls "$dir"/*.c 2>/dev/null | head -n 1)
	if [ ! -f "$1" ]; then
		[ -z "$have_c" ] && continue
		echo "layering: no objects of $dir in $objdir (build first)" >&2
		exit 2
	fi
	: >"$TMP/defined"
	: >"$TMP/used"
	for o in "$@"; do
		src=${dir%/}/$(basename "$o" .o).c
		[ -f "$src" ] || continue        # left over from a removed file
		nm -P -g "$o" | awk -v f="$src" -v d="$TMP/defined" -v u="$TMP/used" '
			$2 == "U" || $2 == "w" || $2 == "v" { print $1, f >> u; next }
			{ print $1, f >> d }'
	done
	# symbol used-by defined-in -> "user definer symbol"
	awk 'NR == FNR { def[$1] = def[$1] " " $2; next }
	     ($1 in def) { n = split(def[$1], f, " ")
	                   for (i = 1; i <= n; i++) if (f[i] != $2) print $2, f[i], $1 }' \
		"$TMP/defined" "$TMP/used" | sort -u >"$TMP/calls"
	find_cycles "calls between the files of ${dir%/}/" <"$TMP/calls" || status=1
done

[ $status -eq 0 ] && echo "layering: $DIRS: no include or call cycles"
exit $status
