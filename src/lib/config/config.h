/* The configuration behind airlock_config: what a sandbox is made of. */
#ifndef AIRLOCK_CONFIG_H
#define AIRLOCK_CONFIG_H

#include <stdatomic.h>
#include <stddef.h>

#include "airlock.h"
#include "host/allowlist.h"
#include "host/secrets.h"
#include "host/tools.h"
#include "mcp/mcp.h"

typedef struct config_mount {
        char *host; /* as given by the caller */
        char *dest; /* normalised relative path under /input */
} config_mount;

struct airlock_config {
        char *workspace; /* NULL: none */
        config_mount *mounts;
        size_t n_mounts;
        net_allowlist *allow;
        secret_store *secrets; /* airlock_config_add_secret */
        tool_registry *tools;
        airlock_limits limits;
        char **preloads;
        size_t n_preloads;
        char **python_paths; /* absolute, resolved host folders (--python-path) */
        size_t n_python_paths;
        airlock_approval approval;
        bool no_auto_figures; /* airlock_config_set_auto_figures(cfg, false) */
        bool input_writable;  /* airlock_config_set_input_writable(cfg, true) */
        mcp_specs servers;    /* upstream MCP servers (airlock_config_add_servers_file) */
        airlock_tool_approver_fn approver; /* airlock_config_set_tool_approver */
        void *approver_data;
        /* The part of the cache fingerprint that this structure alone
         * decides (cache.c), made by the first run that needs it and dropped
         * by every setter: runs share a built configuration read-only, and
         * the first of them to finish the text publishes it atomically. */
        _Atomic(char *) fp_memo;
};

/* The size of airlock_tool_def in the first version of the growable ABI:
 * a caller's struct is at least this large. A field added later goes at the
 * end of the struct, and this stays. */
#define AIRLOCK_TOOL_DEF_SIZE_V1 (offsetof(airlock_tool_def, userdata) + sizeof(void *))

/* Drops the fingerprint memo: every setter calls it before changing c. */
void config_changed(airlock_config *c);

/* Deep copy, so that a sandbox keeps the configuration it was made from. */
int config_clone(const airlock_config *cfg, airlock_config **ret, airlock_error *err);

#endif
