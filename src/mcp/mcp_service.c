/* The server's face (mcp_service.h): the options and the configuration a
 * front-end hands over, kept for the transport that runs them. */
#include <errno.h>
#include <stdlib.h>

#include "base.h"
#include "mcp_core.h"
#include "mcp_service.h"
#include "tools.h"

struct mcp_service {
        mcp_service_options o;
        airlock_config *cfg;
};

int mcp_service_new(airlock_config *cfg, const mcp_service_options *o, mcp_service **ret,
                    airlock_error *err)
{
        *ret = NULL;
        mcp_service *svc = calloc(1, sizeof(*svc));
        if (!svc) {
                airlock_config_free(cfg);
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ENOMEM, NULL, "out of memory");
        }
        svc->o = *o;
        svc->cfg = cfg;
        /* A server holds a few fds for each workspace it stages: see
         * mcp_raise_fd_limit. */
        mcp_raise_fd_limit();
        *ret = svc;
        return 0;
}

const mcp_service_options *mcp_service_opts(const mcp_service *svc)
{
        return &svc->o;
}

airlock_config *mcp_service_config(const mcp_service *svc)
{
        return svc->cfg;
}

char *mcp_service_instructions(const char *library)
{
        return mcp_tools_instructions(library, false);
}

void mcp_service_free(mcp_service *svc)
{
        if (!svc)
                return;
        airlock_config_free(svc->cfg);
        free(svc);
}
