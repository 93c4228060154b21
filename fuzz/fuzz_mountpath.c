/* Fuzzes the --mount path normaliser: any byte string must give either an
 * error or a relative path with no "..", "." or empty part and no '\'. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fsx/fsx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *in = strndup((const char *)data, size);
        if (!in)
                return 0;
        airlock_error err = {0};
        char *out = NULL;
        int r = fsx_normalize_mount_path(in, &out, &err);
        if (r >= 0) {
                /* The contract: never empty, never absolute, no escape. */
                if (!out || !out[0] || out[0] == '/' || strchr(out, '\\'))
                        abort();
                char *copy = strdup(out);
                if (!copy)
                        abort();
                char *save = NULL;
                for (char *p = strtok_r(copy, "/", &save); p; p = strtok_r(NULL, "/", &save))
                        if (strcmp(p, "..") == 0 || strcmp(p, ".") == 0)
                                abort();
                if (strstr(out, "//"))
                        abort();
                free(copy);
        } else if (out) {
                abort(); /* output untouched on failure */
        }
        free(out);
        free(in);
        return 0;
}
