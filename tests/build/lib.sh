# What the build tier's scripts share: the counts, check NAME COMMAND...
# (one line "ok NAME" or "not ok NAME" each) and the closing line that
# tests/run.sh reads. Sourced, after `cd` to the repository.
passed=0 failed=0
check() { # name command...
    local name=$1; shift
    if "$@"; then passed=$((passed + 1)); echo "ok $name"
    else failed=$((failed + 1)); echo "not ok $name"; fi
}
finish() { # script name
    echo "$1: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
