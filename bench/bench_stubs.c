/* The cost of code mode at sandbox build: mcp_hub_start (start an MCP
 * server, initialize, tools/list, name the tools, write the Python stubs)
 * for a server of N tools against one of 1 tool, alternating, so that the
 * difference is what the tools themselves cost. The server is the script
 * given (bench/bench_servers.mjs writes one; any stdio MCP server whose
 * first argument is the number of tools will do).
 *
 * usage: bench_stubs SERVER.py N ROUNDS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "mcp/mcp.h"

static double start_once(const char *script, int n, double *ret_gen_ms)
{
        mcp_specs specs = {0};
        airlock_error err = {0};
        char json[4096];
        snprintf(json, sizeof(json),
                 "{\"command\": \"/usr/bin/python3\", \"args\": [\"%s\", \"%d\"]}", script, n);
        json_t *o = json_loads(json, 0, NULL);
        secret_store *sec = NULL;
        secrets_new(&sec, &err);
        if (mcp_specs_add(&specs, "many", o, NULL, &err) < 0) {
                fprintf(stderr, "%s\n", err.message);
                exit(1);
        }
        json_decref(o);
        mcp_hub *h = NULL;
        char *dir = NULL;
        dynbuf w;
        dynbuf_init(&w, 1 << 16);
        uint64_t t0 = al_now_ns();
        if (mcp_hub_start(&specs, sec, &h, &dir, &w, &err) < 0) {
                fprintf(stderr, "%s\n", err.message);
                exit(1);
        }
        double ms = (double)(al_now_ns() - t0) / 1e6;
        *ret_gen_ms = (double)mcp_hub_stubs_ns(h) / 1e6;
        mcp_hub_free(h);
        free(dir);
        dynbuf_free(&w);
        mcp_specs_free(&specs);
        secrets_free(sec);
        return ms;
}

static int cmp(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
        if (argc < 4)
                return 2;
        int n = atoi(argv[2]), rounds = atoi(argv[3]);
        double *many = calloc((size_t)rounds, sizeof(double)),
               *one = calloc((size_t)rounds, sizeof(double)),
               *gen = calloc((size_t)rounds, sizeof(double)),
               *gen1 = calloc((size_t)rounds, sizeof(double));
        for (int r = 0; r < rounds; r++) {
                many[r] = start_once(argv[1], n, &gen[r]);
                one[r] = start_once(argv[1], 1, &gen1[r]);
        }
        qsort(many, (size_t)rounds, sizeof(double), cmp);
        qsort(one, (size_t)rounds, sizeof(double), cmp);
        qsort(gen, (size_t)rounds, sizeof(double), cmp);
        qsort(gen1, (size_t)rounds, sizeof(double), cmp);
        printf("mcp_hub_start, %d tools: %.1f ms; 1 tool: %.1f ms (medians of %d)\n", n,
               many[rounds / 2], one[rounds / 2], rounds);
        /* The making of the stubs alone (naming, writing the package): the
         * issue's target is under 5 ms for 100 tools. */
        printf("stub generation, %d tools: %.2f ms; 1 tool: %.2f ms (target: < 5 ms for 100)\n", n,
               gen[rounds / 2], gen1[rounds / 2]);
        printf("{\"tools\": %d, \"hub_start_ms\": %.2f, \"hub_start_1_tool_ms\": %.2f, "
               "\"stubs_ms\": %.3f, \"stubs_1_tool_ms\": %.3f}\n",
               n, many[rounds / 2], one[rounds / 2], gen[rounds / 2], gen1[rounds / 2]);
        return 0;
}
