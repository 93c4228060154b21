/* Fuzzes tool argument validation: a tool with a fixed schema (required,
 * typed, union-typed keys) and any JSON the guest sends as its arguments. */
#include <stdint.h>
#include <stdlib.h>

#include "host/tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int never_called(void *userdata, const char *args_json, char **ret_result_json,
                        char **ret_error)
{
        abort();
}

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"q\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},\"x\":{\"type\":\"number\"},"
    "\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},\"a\":{\"type\":\"array\"},"
    "\"z\":{\"type\":\"null\"},\"u\":{\"type\":[\"string\",\"null\"]},\"any\":{}},"
    "\"required\":[\"q\"]}";

static tool_registry *registry(void)
{
        static tool_registry *reg;
        if (reg)
                return reg;
        airlock_error err = {0};
        airlock_tool_def def = {.size = sizeof(airlock_tool_def),
                                .name = "search",
                                .description = "fuzz target",
                                .parameters_json = SCHEMA,
                                .fn = never_called};
        if (tools_new(&reg, &err) < 0 || tools_add_callback(reg, &def, &err) < 0)
                abort();
        return reg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const tool_info *t = tools_find(registry(), "search");
        if (!t)
                abort();
        json_t *args = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!args)
                return 0;
        airlock_error err = {0};
        int r = tools_validate(t, args, &err);
        /* Valid arguments are always an object with the required key. */
        if (r >= 0 && (!json_is_object(args) || !json_is_string(json_object_get(args, "q"))))
                abort();
        if (r < 0 && !err.message[0])
                abort();
        json_decref(args);
        return 0;
}
