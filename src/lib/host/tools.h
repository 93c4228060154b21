/* Host tools: the registry, the tools file, argument validation and dispatch
 * to C callbacks or to commands. */
#ifndef AIRLOCK_TOOLS_H
#define AIRLOCK_TOOLS_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "airlock.h"

#define TOOLS_MAX_PAYLOAD      (1u << 20)  /* arguments of one call, as JSON */
#define TOOLS_MAX_RESULT       (16u << 20) /* stdout of a command tool */
#define TOOLS_MAX_TOOLS        256
#define TOOLS_MAX_FILE         (1u << 20)  /* a tools file */
#define TOOLS_MAX_STDERR       (64u << 10) /* stderr of a command tool kept for the message */
#define TOOLS_MAX_SCHEMA_DEPTH 16          /* nested "items" a value is checked through */

typedef struct tool_info {
        char *name;
        char *description;
        json_t *parameters; /* JSON Schema object, never NULL ({"type":"object"}) */
        airlock_approval approval;
        /* Exactly one of fn, typed_fn or argv is set. */
        airlock_tool_fn fn;
        airlock_tool_typed_fn typed_fn; /* in place of fn: it also names its failure's type */
        void *userdata;
        char **argv;      /* NULL-terminated, as written in the tools file; the
                           * command runs in cwd_fd, so relative paths (argv[0]
                           * with a '/', arguments) resolve against it and a
                           * bare argv[0] is looked up on PATH */
        int cwd_fd;       /* the tools file's folder for command tools, else -1 */
        char *dir;        /* that folder's absolute path (messages, fingerprints) */
        char *file;       /* the tools file that declared it (absolute folder and
                           * its name), or NULL for a callback tool */
        double timeout_s; /* command tools */
} tool_info;

typedef struct tool_registry tool_registry;

int tools_new(tool_registry **ret, airlock_error *err);
void tools_free(tool_registry *reg);
/* Deep copy (for configuration copies held by a cached sandbox). */
int tools_clone(const tool_registry *reg, tool_registry **ret, airlock_error *err);

/* Registers a C tool. Rules: a name already present is replaced and moves
 * last; "execute_code" is refused; names are 1-64 chars of [A-Za-z0-9_.-];
 * parameters must parse as a JSON object. */
int tools_add_callback(tool_registry *reg, const airlock_tool_def *def, airlock_error *err);
/* The same for a typed tool: fn in place of def->fn (which is ignored). */
int tools_add_typed_callback(tool_registry *reg, const airlock_tool_def *def,
                             airlock_tool_typed_fn fn, airlock_error *err);
/* Loads a tools file (docs/design.md "Tools file"): relative commands resolve
 * against the file's folder; every error names the file and the tool. */
int tools_load_file(tool_registry *reg, const char *path, double default_timeout_s,
                    airlock_error *err);
/* Removing an unknown name is -ENOENT naming it. */
int tools_remove(tool_registry *reg, const char *name, airlock_error *err);

size_t tools_count(const tool_registry *reg);
const tool_info *tools_get(const tool_registry *reg, size_t i);
const tool_info *tools_find(const tool_registry *reg, const char *name);
/* True when any registered tool requires approval. */
bool tools_any_requires_approval(const tool_registry *reg);

/* Validates args against the tool's parameters: an object; required keys
 * present; known keys of the declared JSON type ("string", "number",
 * "integer", "boolean", "object", "array", "null", or a list of them); no
 * unknown keys; serialised size within TOOLS_MAX_PAYLOAD. The message names
 * the tool, the argument and what was expected. */
int tools_validate(const tool_info *tool, const json_t *args, airlock_error *err);

/* Kinds of failure a call can end in; the guest maps them to exceptions. */
typedef enum tool_fail {
        TOOL_OK = 0,
        TOOL_FAIL_INVALID, /* unknown tool or bad arguments: ValueError in the guest */
        TOOL_FAIL_RUNTIME, /* the tool ran and failed: RuntimeError in the guest */
} tool_fail;

/* Sets *ret_message to a malloc'd message formatted like printf and
 * returns kind: the one way a call reports its failure. */
tool_fail tools_fail(tool_fail kind, char **ret_message, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* tools_fail with the arguments in ap. */
tool_fail tools_vfail(tool_fail kind, char **ret_message, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Validates and runs the named tool. On success *ret_result holds the result
 * (any JSON value). On failure returns TOOL_FAIL_* and *ret_message holds a
 * malloc'd message. A command tool that crashes, hangs past its timeout,
 * prints something that is not one JSON value, or prints more than
 * TOOLS_MAX_RESULT is a TOOL_FAIL_RUNTIME, never a hang. Thread-safe. */
tool_fail tools_call(const tool_registry *reg, const char *name, const json_t *args,
                     json_t **ret_result, char **ret_message);

/* What bounds one call from outside, besides the tool's own timeout: the
 * run it serves. deadline_ns is a CLOCK_MONOTONIC time (al_now_ns()) or 0
 * for none; cancel_fd, when >= 0, stops the call as soon as it becomes
 * readable (an eventfd or a pipe). A command tool is then killed and the
 * call ends in TOOL_FAIL_RUNTIME saying why. A C callback cannot be
 * interrupted; these only bound command tools. */
typedef struct tool_call_bounds {
        uint64_t deadline_ns;
        int cancel_fd;
        /* The run's secrets (NULL: none): a failure message that quotes a
         * part of the tool's output (the tail of stderr, the head of
         * stdout that is not JSON) is scrubbed before it is cut, and
         * what the tool wrote before it was cut counts as cut. */
        const struct secret_store *secrets;
} tool_call_bounds;

/* tools_call() within bounds (NULL: none). Thread-safe. */
tool_fail tools_call_ex(const tool_registry *reg, const char *name, const json_t *args,
                        const tool_call_bounds *bounds, json_t **ret_result, char **ret_message);
/* tools_call_ex() that also sets *ret_error_type (when not NULL) to the
 * malloc'd type name a failing typed tool gave, or leaves it NULL. */
tool_fail tools_call_typed(const tool_registry *reg, const char *name, const json_t *args,
                           const tool_call_bounds *bounds, json_t **ret_result, char **ret_message,
                           char **ret_error_type);

/* Runs a command tool with input (the arguments as JSON) on its stdin; the
 * part of tools_call() after validation. Internal, exposed for tests. */
tool_fail tools_run_command(const tool_info *tool, const char *input, size_t input_len,
                            const tool_call_bounds *bounds, json_t **ret_result,
                            char **ret_message);

/* A canonical JSON description of every tool (names, descriptions, schemas,
 * approval, commands and timeouts, callback addresses) for fingerprints. */
char *tools_fingerprint_text(const tool_registry *reg);

#endif
