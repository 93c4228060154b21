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
#include <unistd.h>

#include "base.h"
#include "mcp_internal.h"
#include "tenant_workspace.h"
#include "tools.h"

void version_free(cfg_version *v)
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

/* The current version, with a reference the caller drops with cfg_drop. */
cfg_version *cfg_take(mcp_server *srv)
{
        pthread_mutex_lock(&srv->cfg_lock);
        cfg_version *v = srv->cur;
        if (v)
                v->refs++;
        pthread_mutex_unlock(&srv->cfg_lock);
        return v;
}

void cfg_drop(mcp_server *srv, cfg_version *v)
{
        if (!v)
                return;
        pthread_mutex_lock(&srv->cfg_lock);
        bool last = --v->refs == 0;
        pthread_mutex_unlock(&srv->cfg_lock);
        if (last)
                version_free(v);
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
const airlock_config *version_cfg(mcp_server *srv, cfg_version *v, const char *owner,
                                  airlock_error *err)
{
        if (!srv->workspaces)
                return v->cfg;
        const char *tenant = tenant_of(srv, owner);
        char path[64 + TENANT_NAME_MAX];
        if (mcp_workspace_path(srv->workspaces, tenant, path, sizeof(path), err) < 0)
                return NULL;
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
        cfg_version *v = cfg_take(srv);
        *ref = v;
        if (!v)
                return NULL;
        const airlock_config *cfg = version_cfg(srv, v, owner, err);
        if (!cfg) {
                cfg_drop(srv, v);
                *ref = NULL;
        }
        return cfg;
}

static void sessions_cfg_put(void *arg, void *ref)
{
        cfg_drop(arg, ref);
}

void version_source_sessions(mcp_server *srv)
{
        mcp_sessions_set_config_source(srv->sessions, sessions_cfg_get, sessions_cfg_put, srv);
}

/* Makes the version of cfg: the tool description (from the sandbox, built
 * now through the cache the calls use, so that it names the packages found
 * inside), the instructions, the caps the results need. A configured path
 * at fault is a configuration error; a sandbox that cannot start (a kernel
 * feature) leaves the description without the packages, and each call
 * reports the failure. With owns, the version owns cfg from here on, and
 * frees it on failure too. Returns 0 with *ret holding one reference. */
int version_new(mcp_server *srv, airlock_config *cfg, bool owns, cfg_version **ret,
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
                version_free(v);
                return berr.code < 0 ? berr.code : -EINVAL;
        }
        if (!desc_json) {
                fprintf(stderr,
                        "%s: warning: %s; the tool description does not list "
                        "the packages\n",
                        server_name(srv), berr.message);
                desc_json = airlock_describe_json(cfg, err);
        }
        if (!desc_json) {
                version_free(v);
                return -EINVAL;
        }
        json_t *d = json_loads(desc_json, 0, NULL);
        if (!d) {
                version_free(v);
                return al_error(err, -ENOMEM, NULL, "cannot read the tool description");
        }
        size_t i;
        json_t *w;
        json_array_foreach (json_object_get(d, "warnings"), i, w)
                fprintf(stderr, "%s: warning: %s\n", server_name(srv), json_string_value(w));
        v->instructions = strdup(json_string_value(json_object_get(d, "instructions")));
        v->tools = mcp_tools_list(srv->sessions, d, airlock_config_allow_count(cfg) > 0,
                                  srv->workspaces != NULL);
        json_decref(d);
        airlock_limits lim;
        airlock_config_get_limits(cfg, &lim);
        v->max_stdout = lim.max_stdout;
        if (!v->instructions || !v->tools) {
                version_free(v);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        *ret = v;
        return 0;
}
