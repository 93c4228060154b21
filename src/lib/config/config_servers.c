/* The public functions of the upstream servers' configuration (airlock.h,
 * "upstream MCP servers"). */
#include <string.h>

#include "config/config.h"
#include "mcp/mcp.h"

int airlock_config_add_servers_file(airlock_config *cfg, const char *file, airlock_error *err)
{
        airlock_error_clear(err);
        if (!cfg || !file)
                return al_error(err, -EINVAL, NULL, "add servers: no configuration or file");
        config_changed(cfg);
        return mcp_specs_load_file(&cfg->servers, file, err);
}

int airlock_config_add_servers_json(airlock_config *cfg, const char *json_text, airlock_error *err)
{
        airlock_error_clear(err);
        if (!cfg || !json_text)
                return al_error(err, -EINVAL, NULL, "add servers: no configuration or JSON");
        config_changed(cfg);
        return mcp_specs_load_text(&cfg->servers, json_text, err);
}

int airlock_config_add_server(airlock_config *cfg, const char *name, const char *server_json,
                              airlock_error *err)
{
        airlock_error_clear(err);
        if (!cfg || !name || !server_json)
                return al_error(err, -EINVAL, NULL, "add server: missing argument");
        json_error_t jerr;
        _cleanup_json_ json_t *o = json_loads(server_json, JSON_REJECT_DUPLICATES, &jerr);
        if (!o)
                return al_error(err, -EINVAL, NULL, "server '%.64s': not JSON: %s", name,
                                jerr.text);
        config_changed(cfg);
        return mcp_specs_add(&cfg->servers, name, o, NULL, err);
}

void airlock_config_set_tool_approver(airlock_config *cfg, airlock_tool_approver_fn fn,
                                      void *userdata)
{
        if (!cfg)
                return;
        config_changed(cfg);
        cfg->approver = fn;
        cfg->approver_data = userdata;
}
