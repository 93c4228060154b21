/* The MCP server's core without a process or a transport: JSON-RPC messages
 * go in through mcp_core_handle, and what the server sends comes out of a
 * sink, as the stdio and HTTP transports see it. A change to the MCP layer
 * is checked here in seconds; the SDK and client tests (tests/mcp) then
 * check the same over real transports. Starts a real sandbox (tools/call). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "mcp_core.h"
#include "tools.h"

/* Collects what the server sends for one request. */
typedef struct test_sink {
        mcp_sink sink;
        pthread_mutex_t lock;
        pthread_cond_t changed;
        json_t *msgs; /* every message, in order */
        bool done;    /* call_done came */
} test_sink;

static void sink_send(mcp_sink *s, json_t *msg)
{
        test_sink *t = (test_sink *)s;
        pthread_mutex_lock(&t->lock);
        json_array_append_new(t->msgs, msg);
        pthread_cond_broadcast(&t->changed);
        pthread_mutex_unlock(&t->lock);
}

static void sink_done(mcp_sink *s)
{
        test_sink *t = (test_sink *)s;
        pthread_mutex_lock(&t->lock);
        t->done = true;
        pthread_cond_broadcast(&t->changed);
        pthread_mutex_unlock(&t->lock);
}

static void sink_init(test_sink *t)
{
        memset(t, 0, sizeof(*t));
        t->sink.send = sink_send;
        t->sink.call_done = sink_done;
        pthread_mutex_init(&t->lock, NULL);
        pthread_cond_init(&t->changed, NULL);
        t->msgs = json_array();
}

static void sink_free(test_sink *t)
{
        json_decref(t->msgs);
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->changed);
}

static mcp_server *srv;
/* The command's options: its configuration belongs to them, not to the
 * server, and is freed after it. */
static cli_options opts;

static int setup(void **state)
{
        char name[] = "mcp";
        char *argv[] = {name, NULL};
        airlock_error err = {0};
        assert_int_equal(cli_parse_options(1, argv, CLI_MCP, &opts, &err), 0);
        mcp_core_options co = {.stateless = true};
        int r = mcp_core_new(opts.cfg, &opts.caps, &co, &srv, &err);
        if (r < 0 && err.kind == AIRLOCK_ERROR_SANDBOX) {
                print_message("no sandbox here: %s\n", err.message);
                mcp_core_free(srv);
                srv = NULL;
                return 0;
        }
        assert_int_equal(r, 0);
        return 0;
}

static int teardown(void **state)
{
        if (srv)
                mcp_core_free(srv);
        cli_options_free(&opts);
        return 0;
}

/* Sends one line as a client would and returns the response (owned by the
 * caller), waiting for a tools/call to end. */
static json_t *request(const char *line)
{
        if (!srv)
                skip();
        jsonrpc_message m;
        airlock_error err;
        int code = jsonrpc_parse(line, strlen(line), &m, &err);
        test_sink t;
        sink_init(&t);
        json_t *resp = NULL;
        if (code != 0) {
                resp = json_pack("{s:{s:i, s:s}}", "error", "code", code, "message", err.message);
        } else {
                int started = mcp_core_handle(srv, &t.sink, &m);
                pthread_mutex_lock(&t.lock);
                while (started == 1 && !t.done)
                        pthread_cond_wait(&t.changed, &t.lock);
                pthread_mutex_unlock(&t.lock);
                size_t n = json_array_size(t.msgs);
                resp = n ? json_incref(json_array_get(t.msgs, n - 1)) : NULL;
        }
        json_decref(m.root);
        sink_free(&t);
        return resp;
}

/* A small path walk: "result.serverInfo.name", "result.content.0.text". */
static json_t *walk(json_t *v, const char *path)
{
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", path);
        char *save = NULL;
        for (char *k = strtok_r(buf, ".", &save); v && k; k = strtok_r(NULL, ".", &save))
                v = json_is_array(v) ? json_array_get(v, strtoul(k, NULL, 10))
                                     : json_object_get(v, k);
        return v;
}

static const char *text_at(json_t *v, const char *path)
{
        return json_string_value(walk(v, path));
}

static void test_initialize_and_ping(void **state)
{
        json_t *r = request("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
                            "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
                            "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}");
        assert_non_null(r);
        assert_string_equal(text_at(r, "result.serverInfo.name"), "airlock");
        assert_string_equal(text_at(r, "result.protocolVersion"), "2025-11-25");
        assert_non_null(text_at(r, "result.instructions"));
        json_decref(r);
        r = request("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}");
        assert_true(json_is_object(walk(r, "result")));
        json_decref(r);
}

static void test_tools_list_names_every_tool_once(void **state)
{
        json_t *r = request("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}");
        json_t *tools = walk(r, "result.tools");
        assert_true(json_is_array(tools));
        assert_true(json_array_size(tools) >= 1);
        bool exec = false;
        for (size_t i = 0; i < json_array_size(tools); i++) {
                json_t *t = json_array_get(tools, i);
                const char *name = text_at(t, "name");
                assert_non_null(name);
                assert_true(json_is_object(walk(t, "inputSchema")));
                assert_non_null(text_at(t, "description"));
                exec |= strcmp(name, "execute_code") == 0;
                for (size_t k = 0; k < i; k++)
                        assert_string_not_equal(text_at(json_array_get(tools, k), "name"), name);
        }
        assert_true(exec);
        json_decref(r);
}

/* The tests' fixture of the server's tools (tests/mcp/fixtures/
 * server-tools.json, which the SDK and client tests compare tools/list
 * with) is the tool table's, in its order, and tools/list serves exactly
 * that. */
static void test_the_fixture_is_the_tool_table(void **state)
{
        json_error_t jerr;
        json_t *fixture =
            json_load_file(REPO_DIR "/tests/mcp/fixtures/server-tools.json", 0, &jerr);
        assert_non_null(fixture);
        size_t n = 0;
        for (const mcp_tool *t; (t = mcp_tool_at(n)); n++)
                assert_string_equal(json_string_value(json_array_get(fixture, n)), t->name);
        assert_int_equal(json_array_size(fixture), n);
        /* This server has no --tenants-dir: the workspace tools (the
         * fixture's last ones) are neither listed nor named. */
        size_t listed = 0;
        for (size_t i = 0; i < n; i++)
                if (!mcp_tool_at(i)->workspace) {
                        assert_int_equal(i, listed); /* they come last */
                        listed++;
                }
        assert_true(listed < n);
        json_t *r = request("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\"}");
        json_t *tools = walk(r, "result.tools");
        assert_int_equal(json_array_size(tools), listed);
        for (size_t i = 0; i < listed; i++)
                assert_string_equal(text_at(json_array_get(tools, i), "name"),
                                    json_string_value(json_array_get(fixture, i)));
        /* The unknown-tool message names them all; with workspaces, the
         * workspace tools too. */
        char msg[512];
        mcp_tool_unknown("nope", false, msg, sizeof(msg));
        for (size_t i = 0; i < n; i++)
                assert_true(!strstr(msg, mcp_tool_at(i)->name) == mcp_tool_at(i)->workspace);
        mcp_tool_unknown("nope", true, msg, sizeof(msg));
        for (size_t i = 0; i < n; i++)
                assert_non_null(strstr(msg, mcp_tool_at(i)->name));
        json_decref(r);
        json_decref(fixture);
}

/* A session tool refuses an argument its schema does not name, saying
 * which it takes. */
static void test_session_tools_check_their_arguments(void **state)
{
        json_t *r = request("{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":"
                            "{\"name\":\"session_open\",\"arguments\":{\"x\":1}}}");
        assert_true(json_is_true(walk(r, "result.isError")));
        assert_non_null(strstr(text_at(r, "result.content.0.text"),
                               "session_open has no argument \"x\"; it takes none"));
        json_decref(r);
        r = request("{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":"
                    "{\"name\":\"session_close\",\"arguments\":{\"session\":\"s\",\"y\":2}}}");
        assert_non_null(strstr(text_at(r, "result.content.0.text"),
                               "session_close has no argument \"y\"; it takes only \"session\""));
        json_decref(r);
}

/* The text of the tool error mcp_tool_check gives for args (a JSON text),
 * or "" when it takes them. */
static char checked[1100];
static const char *check(const char *tool, const char *args)
{
        json_t *a = json_loads(args, 0, NULL);
        json_t *bad = mcp_tool_check(mcp_tool_find(tool, true), a);
        snprintf(checked, sizeof(checked), "%s", bad ? text_at(bad, "content.0.text") : "");
        json_decref(bad);
        json_decref(a);
        return checked;
}

/* Every tool's required arguments are checked from its row's schema, with
 * the refusals the handlers used to write: present, of their type, an
 * array within its minItems and maxItems; execute_code's from the
 * library's schema. */
static void test_required_arguments_come_from_the_schema(void **state)
{
        assert_string_equal(check("session_close", "{}"),
                            "session_close needs the argument \"session\": the handle "
                            "session_open returned");
        assert_string_equal(check("session_fork", "{\"session\": 3}"),
                            "session_fork needs the argument \"session\": the handle of the "
                            "session to copy");
        assert_string_equal(check("session_fork", "{\"session\": \"s\"}"), "");
        assert_string_equal(check("execute_code", "{}"),
                            "execute_code needs the argument \"code\": a string of Python source");
        assert_string_equal(check("execute_code", "{\"code\": \"1\", \"session\": 4}"), "");
        assert_string_equal(check("execute_code", "{\"code\": \"1\", \"x\": 1}"),
                            "execute_code has no argument \"x\"; it takes only \"code\" and "
                            "\"session\"");
        const char *want_files = "workspace_write needs \"files\": a list of {\"path\", \"text\"} "
                                 "or {\"path\", \"base64\"}; nothing was written";
        assert_string_equal(check("workspace_write", "{}"), want_files);
        assert_string_equal(check("workspace_write", "{\"files\": []}"), want_files);
        assert_string_equal(check("workspace_remove", "{\"paths\": \"a\"}"),
                            "workspace_remove needs \"paths\": a list of paths in your "
                            "workspace; nothing was removed");
        json_t *many = json_pack("{s:[]}", "paths");
        for (int i = 0; i < 1001; i++)
                json_array_append_new(json_object_get(many, "paths"), json_string("a"));
        char *text = json_dumps(many, 0);
        assert_string_equal(check("workspace_remove", text),
                            "workspace_remove takes at most 1000 paths a call (got 1001); "
                            "nothing was removed");
        free(text);
        json_decref(many);
        /* The library's schema of execute_code requires what the check
         * does. */
        airlock_error err;
        airlock_config *cfg = NULL;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        char *desc = airlock_describe_json(cfg, &err);
        assert_non_null(desc);
        json_t *d = json_loads(desc, 0, NULL);
        json_t *req = walk(d, "input_schema.required");
        assert_int_equal(json_array_size(req), 1);
        assert_string_equal(json_string_value(json_array_get(req, 0)), "code");
        assert_string_equal(text_at(d, "input_schema.properties.code.type"), "string");
        json_decref(d);
        free(desc);
        airlock_config_free(cfg);
}

/* session_open and session_fork give the handle as structuredContent,
 * which their outputSchema describes, beside the text and _meta; the
 * instructions count and name the tools that tools/list gives, not the
 * library's "one tool". */
static void test_session_handles_are_structured_and_the_instructions_count_the_tools(void **state)
{
        json_t *r = request("{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"tools/list\"}");
        json_t *tools = walk(r, "result.tools");
        size_t i, listed = json_array_size(tools);
        json_t *t;
        json_array_foreach (tools, i, t) {
                const char *name = text_at(t, "name");
                if (strcmp(name, "session_open") == 0 || strcmp(name, "session_fork") == 0) {
                        assert_string_equal(text_at(t, "outputSchema.type"), "object");
                        assert_string_equal(text_at(t, "outputSchema.required.0"), "session");
                        assert_string_equal(text_at(t, "outputSchema.properties.session.type"),
                                            "string");
                }
        }
        json_decref(r);
        r = request("{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"tools/call\",\"params\":"
                    "{\"name\":\"session_open\",\"arguments\":{}}}");
        assert_false(json_is_true(walk(r, "result.isError")));
        const char *h = text_at(r, "result.structuredContent.session");
        assert_non_null(h);
        assert_string_equal(
            h, json_string_value(json_object_get(walk(r, "result._meta"), "dev.airlock/session")));
        char line[256];
        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":22,\"method\":\"tools/call\",\"params\":{\"name\":"
                 "\"session_fork\",\"arguments\":{\"session\":\"%s\"}}}",
                 h);
        json_t *f = request(line);
        const char *fh = text_at(f, "result.structuredContent.session");
        assert_non_null(fh);
        assert_string_not_equal(fh, h);
        for (int k = 0; k < 2; k++) {
                snprintf(line, sizeof(line),
                         "{\"jsonrpc\":\"2.0\",\"id\":23,\"method\":\"tools/call\",\"params\":{"
                         "\"name\":\"session_close\",\"arguments\":{\"session\":\"%s\"}}}",
                         k ? fh : h);
                json_decref(request(line));
        }
        json_decref(f);
        json_decref(r);
        r = request("{\"jsonrpc\":\"2.0\",\"id\":24,\"method\":\"initialize\",\"params\":"
                    "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
                    "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}");
        const char *ins = text_at(r, "result.instructions");
        char want[64];
        snprintf(want, sizeof(want), "This server offers %zu tools: execute_code", listed);
        assert_non_null(ins);
        assert_true(strncmp(ins, want, strlen(want)) == 0);
        assert_non_null(strstr(ins, "session_open, session_close and session_fork"));
        assert_null(strstr(ins, "one tool"));
        json_decref(r);
}

static void test_errors_of_json_rpc(void **state)
{
        json_t *r = request("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"no/such\"}");
        assert_int_equal(json_integer_value(walk(r, "error.code")), RPC_METHOD_NOT_FOUND);
        json_decref(r);
        r = request("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":");
        assert_int_equal(json_integer_value(walk(r, "error.code")), RPC_PARSE_ERROR);
        json_decref(r);
        r = request("{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":"
                    "{\"name\":\"no_such_tool\",\"arguments\":{}}}");
        /* An unknown tool is a protocol error or an error result, naming it. */
        json_t *code = walk(r, "error.code");
        const char *msg = code ? text_at(r, "error.message") : text_at(r, "result.content.0.text");
        assert_non_null(msg);
        assert_non_null(strstr(msg, "no_such_tool"));
        json_decref(r);
}

static void test_execute_code_runs(void **state)
{
        json_t *r = request("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
                            "{\"name\":\"execute_code\",\"arguments\":{\"code\":\"print(6*7)\"}}}");
        assert_non_null(r);
        assert_true(json_is_false(walk(r, "result.isError")));
        assert_string_equal(text_at(r, "result.content.0.text"), "42\n");
        json_decref(r);
        r = request("{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":"
                    "{\"name\":\"execute_code\",\"arguments\":{\"code\":\"1/0\"}}}");
        assert_true(json_is_true(walk(r, "result.isError")));
        assert_non_null(strstr(text_at(r, "result.content.0.text"), "ZeroDivisionError"));
        json_decref(r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_initialize_and_ping),
            cmocka_unit_test(test_tools_list_names_every_tool_once),
            cmocka_unit_test(test_errors_of_json_rpc),
            cmocka_unit_test(test_the_fixture_is_the_tool_table),
            cmocka_unit_test(test_session_tools_check_their_arguments),
            cmocka_unit_test(test_required_arguments_come_from_the_schema),
            cmocka_unit_test(
                test_session_handles_are_structured_and_the_instructions_count_the_tools),
            cmocka_unit_test(test_execute_code_runs),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
