/* The configuration's versions: what the server made of one configuration
 * (the tool description, the instructions, the caps of results) and, with
 * --tenants-dir, each tenant's copy of it. A reload makes a new version;
 * calls and sessions hold references on the version they started with. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base.h"
#include "mcp_internal.h"
#include "tenant_workspace.h"
#include "tools.h"

void mcp_version_free(cfg_version *v)
{
        if (!v)
                return;
        for (tenant_cfg *t = v->tenants, *next; t; t = next) {
                next = t->next;
                airlock_config_free(t->cfg);
                free(t);
        }
        json_decref(v->tools);
        free(v->instructions);
        if (v->owns_cfg)
                airlock_config_free(v->cfg);
        free(v);
}

/* The current version, with a reference the caller drops with mcp_cfg_drop. */
cfg_version *mcp_cfg_take(mcp_server *srv)
{
        pthread_mutex_lock(&srv->cfg_lock);
        cfg_version *v = srv->cur;
        if (v)
                v->refs++;
        pthread_mutex_unlock(&srv->cfg_lock);
        return v;
}

void mcp_cfg_drop(mcp_server *srv, cfg_version *v)
{
        if (!v)
                return;
        pthread_mutex_lock(&srv->cfg_lock);
        bool last = --v->refs == 0;
        pthread_mutex_unlock(&srv->cfg_lock);
        if (last)
                mcp_version_free(v);
}

/* The tenant whose workspace a call of owner uses. */
const char *tenant_of(const mcp_server *srv, const char *owner)
{
        return owner ? owner : srv->tenant;
}

/* The configuration a call of owner runs with under version v: v's own, or
 * with --tenants-dir the tenant's copy of it, whose workspace is the
 * tenant's folder (made on first use, then kept by v). The folder is
 * checked (and made again if the operator removed it) at every call.
 * Returns NULL with err filled when the folder or the copy cannot be
 * made. */
const airlock_config *mcp_version_cfg(mcp_server *srv, cfg_version *v, const char *owner,
                                      airlock_error *err)
{
        if (!srv->workspaces)
                return v->cfg;
        const char *tenant = tenant_of(srv, owner);
        char path[64 + TENANT_NAME_MAX];
        if (mcp_workspace_path(srv->workspaces, tenant, path, sizeof(path), err) < 0)
                return NULL;
        /* Another host's change (shared storage), which the cache's
         * inotify cannot see: its next walk of the tree must not be
         * spared. Before the run's fingerprint, so that a change finished
         * before this call began is in it. */
        tenant_gen_change ch;
        if (mcp_workspace_moved(srv->workspaces, tenant, &ch) > 0) {
                /* The folders and files the generation record names, or
                 * the tree. */
                if (ch.all)
                        airlock_cache_workspace_changed(srv->cache, path);
                if (!ch.all && ch.n)
                        airlock_cache_workspace_changed_in(srv->cache, path,
                                                           (const char *const *)ch.dirs, ch.n);
                if (!ch.all && ch.n_files)
                        airlock_cache_workspace_files_changed(
                            srv->cache, path, (const char *const *)ch.files, ch.sizes,
                            (const char *const *)ch.hashes, ch.n_files);
        }
        tenant_gen_change_free(&ch);
        pthread_mutex_lock(&srv->cfg_lock);
        for (tenant_cfg *t = v->tenants; t; t = t->next)
                if (strcmp(t->name, tenant) == 0) {
                        pthread_mutex_unlock(&srv->cfg_lock);
                        return t->cfg;
                }
        bool full = v->n_tenants >= MAX_TENANT_CFGS;
        pthread_mutex_unlock(&srv->cfg_lock);
        if (full) {
                al_error(err, -EUSERS, NULL,
                         "this server holds configurations for %d tenants already; retry after "
                         "its next reload",
                         MAX_TENANT_CFGS);
                return NULL;
        }
        tenant_cfg *t = calloc(1, sizeof(*t));
        if (!t) {
                al_error(err, -ENOMEM, NULL, "out of memory");
                return NULL;
        }
        snprintf(t->name, sizeof(t->name), "%s", tenant);
        if (airlock_config_copy(v->cfg, &t->cfg, err) < 0 ||
            airlock_config_set_workspace(t->cfg, path, err) < 0) {
                airlock_config_free(t->cfg);
                free(t);
                return NULL;
        }
        pthread_mutex_lock(&srv->cfg_lock);
        for (tenant_cfg *o = v->tenants; o; o = o->next)
                if (strcmp(o->name, tenant) == 0) {
                        /* Another call of the tenant made it meanwhile. */
                        pthread_mutex_unlock(&srv->cfg_lock);
                        airlock_config_free(t->cfg);
                        free(t);
                        return o->cfg;
                }
        t->next = v->tenants;
        v->tenants = t;
        v->n_tenants++;
        pthread_mutex_unlock(&srv->cfg_lock);
        return t->cfg;
}

/* The session table's view of the same (mcp_sessions_set_config_source). */
static const airlock_config *sessions_cfg_get(void *arg, const char *owner, void **ref,
                                              airlock_error *err)
{
        mcp_server *srv = arg;
        cfg_version *v = mcp_cfg_take(srv);
        *ref = v;
        if (!v)
                return NULL;
        const airlock_config *cfg = mcp_version_cfg(srv, v, owner, err);
        if (!cfg) {
                mcp_cfg_drop(srv, v);
                *ref = NULL;
        }
        return cfg;
}

static void sessions_cfg_put(void *arg, void *ref)
{
        mcp_cfg_drop(arg, ref);
}

void mcp_version_source_sessions(mcp_server *srv)
{
        mcp_sessions_set_config_source(srv->sessions, sessions_cfg_get, sessions_cfg_put, srv);
}

/* The library describes the configuration it is given, and with
 * --tenants-dir that is the server's, which has no workspace: its "There is
 * no /input" would tell the model that the files its client put in the
 * tenant's workspace are not there. Each tenant's runs get that workspace
 * as /input, so the description says so instead. The text is the same for
 * every tenant: it names no file (a listing would be one tenant's). */
#define NO_INPUT_LINE "- There is no /input: no host files are available to the code.\n"
#define FILES_HEADING "\nFiles:\n"
#define TENANT_INPUT_LINE                                                                          \
        "- /input holds your workspace on this server: the files put there with the "              \
        "workspace_write tool (workspace_list lists them, workspace_remove removes them), as "     \
        "they were when the call started (a session keeps those it was opened with). What the "    \
        "code changes there is never written back to the workspace.\n"

static int describe_tenant_input(json_t *d)
{
        const char *text = json_string_value(json_object_get(d, "description"));
        if (!text)
                return 0;
        const char *files = strstr(text, FILES_HEADING);
        if (!files)
                return 0;
        size_t head = (size_t)(files - text) + strlen(FILES_HEADING);
        const char *rest = text + head;
        /* Without mounts the library says there is no /input: that line
         * goes. With mounts, its lines on them stay after this one. */
        if (strncmp(rest, NO_INPUT_LINE, strlen(NO_INPUT_LINE)) == 0)
                rest += strlen(NO_INPUT_LINE);
        _cleanup_free_ char *out = NULL;
        if (asprintf(&out, "%.*s%s%s", (int)head, text, TENANT_INPUT_LINE, rest) < 0)
                return -ENOMEM;
        return json_object_set_new(d, "description", json_string(out)) == 0 ? 0 : -ENOMEM;
}

/* Makes the version of cfg: the tool description (from the sandbox, built
 * now through the cache the calls use, so that it names the packages found
 * inside), the instructions, the caps the results need. A configured path
 * at fault is a configuration error; a sandbox that cannot start (a kernel
 * feature) leaves the description without the packages, and each call
 * reports the failure. With owns, the version owns cfg from here on, and
 * frees it on failure too. Returns 0 with *ret holding one reference. */
int mcp_version_new(mcp_server *srv, airlock_config *cfg, bool owns, cfg_version **ret,
                    airlock_error *err)
{
        *ret = NULL;
        cfg_version *v = calloc(1, sizeof(*v));
        if (!v) {
                if (owns)
                        airlock_config_free(cfg);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        v->refs = 1;
        v->cfg = cfg;
        v->owns_cfg = owns;
        airlock_error berr = {0};
        _cleanup_free_ char *desc_json = airlock_cache_describe_json(srv->cache, cfg, &berr);
        if (!desc_json && berr.kind == AIRLOCK_ERROR_INPUT && berr.path[0]) {
                *err = berr;
                mcp_version_free(v);
                return berr.code < 0 ? berr.code : -EINVAL;
        }
        if (!desc_json) {
                fprintf(stderr,
                        "%s: warning: %s; the tool description does not list "
                        "the packages\n",
                        mcp_server_name(srv), berr.message);
                desc_json = airlock_describe_json(cfg, err);
        }
        if (!desc_json) {
                mcp_version_free(v);
                return -EINVAL;
        }
        json_t *d = json_loads(desc_json, 0, NULL);
        if (!d) {
                mcp_version_free(v);
                return al_error(err, -ENOMEM, NULL, "cannot read the tool description");
        }
        size_t i;
        json_t *w;
        json_array_foreach (json_object_get(d, "warnings"), i, w)
                fprintf(stderr, "%s: warning: %s\n", mcp_server_name(srv), json_string_value(w));
        if (srv->workspaces && describe_tenant_input(d) < 0) {
                json_decref(d);
                mcp_version_free(v);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        v->instructions = mcp_tools_instructions(
            json_string_value(json_object_get(d, "instructions")), srv->workspaces != NULL);
        v->tools = mcp_tools_list(srv->sessions, d, airlock_config_allow_count(cfg) > 0,
                                  srv->workspaces != NULL);
        json_decref(d);
        airlock_limits lim;
        airlock_config_get_limits(cfg, &lim);
        v->max_stdout = lim.max_stdout;
        if (!v->instructions || !v->tools) {
                mcp_version_free(v);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        *ret = v;
        return 0;
}

/* ---- the first version, built while the server reads (airlock mcp) ---- */

static void *build_main(void *arg)
{
        mcp_server *srv = arg;
        cfg_version *v = NULL;
        airlock_error err = {0};
        int r = mcp_version_new(srv, srv->build_cfg, false, &v, &err);
        pthread_mutex_lock(&srv->cfg_lock);
        srv->cur = v;
        srv->build_result = r;
        srv->build_err = err;
        srv->building = false;
        bool warm = r >= 0 && srv->warm_when_built;
        pthread_cond_broadcast(&srv->built);
        pthread_mutex_unlock(&srv->cfg_lock);
        if (r < 0) {
                /* The reader stops at once, waiting for a request or for
                 * input, and the command reports the error (cmd_mcp). */
                atomic_store(&srv->build_failed, true);
                uint64_t one = 1;
                ssize_t n = write(srv->build_failed_fd, &one, sizeof(one));
                (void)n; /* an eventfd write fails only on overflow */
        }
        if (warm)
                mcp_warm_up_after_build(srv);
        return NULL;
}

/* The instructions are the configuration's alone (build_instructions in
 * describe.c): airlock_describe gives the very text the version will hold,
 * without a sandbox, so that server/discover can answer during the build.
 * Without them (a configured path that cannot be read, say), server/discover
 * waits for the build as every other request does, and the build reports
 * the error. */
int mcp_version_build_start(mcp_server *srv, airlock_config *cfg, airlock_error *err)
{
        airlock_error ignored;
        _cleanup_free_ char *library = NULL;
        (void)airlock_describe(cfg, NULL, &library, &ignored);
        srv->first_instructions = mcp_tools_instructions(library, srv->workspaces != NULL);
        srv->build_failed_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (srv->build_failed_fd < 0) {
                int e = errno;
                return al_error(err, -e, NULL, "cannot make an eventfd: %s", strerror(e));
        }
        srv->build_cfg = cfg;
        srv->building = true;
        int r = pthread_create(&srv->build_thread, NULL, build_main, srv);
        if (r != 0) {
                srv->building = false;
                return al_error(err, -r, NULL, "cannot start a thread: %s", strerror(r));
        }
        srv->build_joinable = true;
        return 0;
}

bool mcp_version_wait(mcp_server *srv)
{
        pthread_mutex_lock(&srv->cfg_lock);
        while (srv->building)
                pthread_cond_wait(&srv->built, &srv->cfg_lock);
        bool ok = srv->cur != NULL;
        pthread_mutex_unlock(&srv->cfg_lock);
        return ok;
}

int mcp_version_build_join(mcp_server *srv, airlock_error *err)
{
        if (!srv->build_joinable)
                return 0;
        pthread_join(srv->build_thread, NULL);
        srv->build_joinable = false;
        if (srv->build_result >= 0)
                return 0;
        *err = srv->build_err;
        return srv->build_result;
}
