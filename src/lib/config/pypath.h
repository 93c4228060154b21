/* Host folders of Python packages (--python-path) and the signature of the
 * Python installation a sandbox was built from. */
#ifndef AIRLOCK_PYPATH_H
#define AIRLOCK_PYPATH_H

#include <jansson.h>
#include <sys/types.h>

#include "airlock.h"
#include "core/util.h"

/* At most this many folders; folder N is at PYPATH_GUEST_DIR/N in the guest. */
#define PYPATH_MAX       8
#define PYPATH_GUEST_DIR "/opt/airlock/pythonpath"

/* Makes dir absolute and resolved (*ret malloc'd), and checks that it is a
 * folder whose path names no other Python version than the sandbox's. */
int pypath_normalize(const char *dir, char **ret, airlock_error *err);

/* Checks folder index (already normalised) for the sandbox's Python: no C
 * extension tagged for another version (the first one found is named).
 * Appends the folder's guest path to sys_path, then the guest path of every
 * .pth entry that stays inside it; an entry that points outside is not
 * followed and gets a line in warnings. */
int pypath_inspect(const char *dir, size_t index, json_t *sys_path, dynbuf *warnings,
                   airlock_error *err);

/* As root: a detached, read-only, nosuid, nodev mount of dir (not of the
 * mounts below it), idmapped where the filesystem allows so that the
 * folder's owner appears as the guest's host id (guest_uid, guest_gid).
 * Sets *ret_fd to the mount fd, or to -1 when detached mounts are not for
 * this process (not root): the template then binds dir by its path. */
int pypath_open_tree(const char *dir, uid_t guest_uid, gid_t guest_gid, int *ret_fd,
                     airlock_error *err);

/* A signature of the Python installation and of the configured folders,
 * cheap enough for every run: the status of the standard library's folders
 * and of each site-packages folder, and of every --python-path folder and
 * each of its top-level entries. Any install, removal or upgrade
 * there changes it. ret_hex holds 16 hex digits. */
void pypath_env_signature(char *const *python_paths, size_t n, char ret_hex[17]);

#endif
