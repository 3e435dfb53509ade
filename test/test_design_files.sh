#!/usr/bin/env bash
# test_design_files.sh: dev/DESIGN.md's file table (section 1, "Every file of the tree") names every tracked file, and
# every file it names exists, so the newcomer's map cannot drift from the tree. A file counts as named where its
# name (without its folder) is in the first column of a row of that section; the files under dev/results/ and dev/log/
# are named by those folders' rows (`results/`, `log/`). A planted file the table does not name, and a planted row
# naming a file the tree does not hold, must both be found, so that a check that finds nothing fails here.
set -u
cd "$(dirname "$0")/.." || exit 1
DESIGN=dev/DESIGN.md
if ! tracked=$(git ls-files 2>/dev/null) || [ -z "$tracked" ]; then
    echo "FAIL design_files: git ls-files lists nothing here; run this test in a git checkout of the project"
    exit 1
fi

# named DESIGN: the names in the first column of section 1's table rows, one a line
named() {
    # shellcheck disable=SC2016 # the backquotes are the table's, not a command's
    sed -n '/^## 1\. Files/,/^## 2\./p' "$1" | grep '^| ' | awk -F'|' '{print $2}' | grep -o '`[^`]*`' | tr -d '`' |
        sort -u
}

# names_file NAME PATH: whether a table name stands for a tracked path: the path itself, or its end after a "/" (a
# name without its folder, or with the last folders: `gpt2/vocab.bpe`)
names_file() { [ "$1" = "$2" ] || [[ "$2" == */"$1" ]]; }

# unnamed DESIGN: the files (paths, one a line on stdin) whose names the table does not name
unnamed() {
    local names f n found
    names=$(named "$1")
    while read -r f; do
        case $f in
            dev/results/*) grep -qxF 'results/' <<<"$names" || echo "$f"; continue ;;
            dev/log/*) grep -qxF 'log/' <<<"$names" || echo "$f"; continue ;;
        esac
        found=0
        while read -r n; do names_file "$n" "$f" && { found=1; break; }; done <<<"$names"
        [ "$found" -eq 1 ] || echo "$f"
    done
}

# absent DESIGN: the names the table gives as files (with a dot) that no tracked file has
absent() {
    local n f found
    named "$1" | grep '\.' | while read -r n; do
        found=0
        while read -r f; do names_file "$n" "$f" && { found=1; break; }; done <<<"$tracked"
        [ "$found" -eq 1 ] || echo "$n"
    done
}

missing=$(unnamed "$DESIGN" <<<"$tracked")
if [ -z "$missing" ]; then echo "PASS design_files_all_named"; else
    echo "FAIL design_files_all_named: dev/DESIGN.md's file table (section 1) does not name: $(tr '\n' ' ' <<<"$missing")"
fi
stale=$(absent "$DESIGN")
if [ -z "$stale" ]; then echo "PASS design_files_all_exist"; else
    echo "FAIL design_files_all_exist: dev/DESIGN.md's file table names files the tree does not hold: $(tr '\n' ' ' <<<"$stale")"
fi

# the checks themselves: a planted unnamed file and a planted stale row are found
planted=$(mktemp)
trap 'rm -f "$planted"' EXIT
# shellcheck disable=SC2016 # the backquotes are the table's, not a command's
sed 's/^| `bench_l2_reduce.cu` |/| `bench_l2_reduce.cu`, `no_such_file.cu` |/' "$DESIGN" > "$planted"
if [ "$(unnamed "$planted" <<<"llmc/not_in_the_table.h")" = "llmc/not_in_the_table.h" ] &&
   [ "$(absent "$planted")" = "no_such_file.cu" ]; then
    echo "PASS design_files_checks_find_planted"
else
    echo "FAIL design_files_checks_find_planted: a planted unnamed file or stale row went unreported"
fi
