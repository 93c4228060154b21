/* Writes the guest runtime's protocol constants, as Python, from the tables
 * of src/lib/core/wire_table.h: scripts/embed_runtime.sh runs it at build
 * time and appends its output to src/guest/runtime.py in the embedded
 * runtime, so that the host and the guest read one table. Built for the
 * build machine and run there; it is no part of the library. */
#include <stdio.h>

#include "core/wire_table.h"

/* A C string literal of the table as a Python string literal: the tables
 * hold printable ASCII without quotes or backslashes, which the check
 * below makes sure of, so the text is the same in both languages. */
static int literal(const char *s)
{
        for (const char *p = s; *p; p++)
                if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\') {
                        fprintf(stderr, "gen_wire: %s: not plain ASCII\n", s);
                        return -1;
                }
        return printf("\"%s\"", s) < 0 ? -1 : 0;
}

static int constant(const char *prefix, const char *name, const char *value)
{
        if (printf("%s%s = ", prefix, name) < 0 || literal(value) < 0)
                return -1;
        return putchar('\n') == EOF ? -1 : 0;
}

int main(void)
{
        int r = 0;
        r |= printf("# Generated from src/lib/core/wire_table.h by src/guest/gen_wire.c:\n"
                    "# the host's names for the guest channel. Do not edit.\n") < 0;
#define OP(id)     r |= constant("_OP_", #id, WIRE_OP_##id);
#define KEY(id)    r |= constant("_KEY_", #id, WIRE_KEY_##id);
#define STATUS(id) r |= constant("_STATUS_", #id, WIRE_STATUS_##id);
#define GUEST(id)  r |= constant("_", #id, id);
        WIRE_OPS(OP)
        WIRE_KEYS(KEY)
        WIRE_STATUSES(STATUS)
        WIRE_GUEST(GUEST)
        r |= printf("# The requests the host serves (WIRE_REQUESTS).\n"
                    "_REQUESTS = frozenset((") < 0;
#define REQUEST(id, handler, slow) r |= literal(WIRE_OP_##id) < 0 || printf(", ") < 0;
        WIRE_REQUESTS(REQUEST)
        r |= printf("))\n") < 0;
        r |= printf("# The built-in exceptions a refusal of the host may name.\n"
                    "_KINDS = frozenset((") < 0;
#define KIND(id) r |= literal(WIRE_KIND_##id) < 0 || printf(", ") < 0;
        WIRE_KINDS(KIND)
        r |= printf("))\n") < 0;
        return r || fflush(stdout) != 0 ? 1 : 0;
}
