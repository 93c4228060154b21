/* Tenants' workspaces (--tenants-dir DIR): each tenant's files live in
 * DIR/NAME/, which the server reaches only through the fd of DIR opened
 * once at start, and which the tenant's runs and sessions get as /input.
 * The workspace tools (workspace_write, workspace_remove, workspace_list)
 * let a remote client put its files there, remove them and list them,
 * within caps on the count of entries and their bytes (per tenant: the
 * defaults of --workspace-max-files and --workspace-max-bytes, or the
 * tenants file's max-files and max-bytes). docs/design.md ("Tenants") is
 * the contract. */
#ifndef AIRLOCK_MCP_TENANT_WORKSPACE_H
#define AIRLOCK_MCP_TENANT_WORKSPACE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "airlock.h"
#include "tenant_gen.h"

#define WS_UNSET UINT64_MAX

typedef struct mcp_workspaces mcp_workspaces;

/* Opens dir (created 0700 when missing, one level) and keeps its fd for
 * the process's life. Returns 0 or -errno with err naming dir. */
int mcp_workspaces_open(const char *dir, uint64_t max_files, uint64_t max_bytes,
                        mcp_workspaces **ret, airlock_error *err);
void mcp_workspaces_free(mcp_workspaces *w);
/* The tenants file's caps of some tenants (max-files, max-bytes; WS_UNSET:
 * the default), replacing the previous ones whole. Returns 0 or -ENOMEM. */
int mcp_workspaces_set_overrides(mcp_workspaces *w, const char *const *tenants,
                                 const uint64_t (*caps)[2], size_t n);

/* The workspace path the library stages tenant's /input from:
 * "/proc/self/fd/N/NAME", N the fd of DIR, so that DIR is never resolved
 * by name again; the library opens NAME without following a link there.
 * The folder is created (0700) when missing. Returns 0 or -errno with err
 * filled (a message for the tenant: it never names DIR). */
int mcp_workspace_path(mcp_workspaces *w, const char *tenant, char *out, size_t size,
                       airlock_error *err);

/* On shared storage mcp_workspace_path looks the folder up at most once a
 * second per tenant (each lookup is a round trip there). A run that then
 * finds the folder missing or not a folder (an operator removed or
 * replaced it meanwhile) asks this: the folder is looked up now, made
 * again when missing, and 1 returned (run again: the cache walks it anew),
 * or -errno with err filled as mcp_workspace_path fills it (a link, never
 * followed). 0 on a local disk, where every call looked already. */
int mcp_workspace_recheck(mcp_workspaces *w, const char *tenant, airlock_error *err);

/* The same path, made only as text (the folder is neither made nor
 * checked): what the tenant's configurations name, for letting go of what
 * the cache keeps of it. Returns 0 or -errno. */
int mcp_workspace_name(const mcp_workspaces *w, const char *tenant, char *out, size_t size);

/* Whether the tenant's generation (DIR/.airlock/NAME, which every
 * server's workspace tools bump under the tenant's lock) moved since this
 * server last saw or moved it: 1 once per move (and at a tenant's first
 * call) with *ret the folders changed since the generation this server
 * saw last, as the generation record names them, or all (the record cannot
 * tell: tenant_gen.h); else 0. One fstatat, and on a move an open, a read
 * and a close. A server whose DIR another host shares then tells the cache
 * (airlock_cache_workspace_changed_in): inotify never reports another
 * host's change. The caller frees *ret (tenant_gen_change_free). */
int mcp_workspace_moved(mcp_workspaces *w, const char *tenant, tenant_gen_change *ret);

/* The tools' answers (CallToolResult: content, structuredContent, isError
 * for a refusal), for tenant. args are checked against the schemas in
 * tools.c first. A refused request changes nothing: every path and both
 * caps are checked before anything is written or removed. */
json_t *mcp_workspace_write(mcp_workspaces *w, const char *tenant, const json_t *args);
json_t *mcp_workspace_remove(mcp_workspaces *w, const char *tenant, const json_t *args);
json_t *mcp_workspace_list(mcp_workspaces *w, const char *tenant, const json_t *args);

#endif
