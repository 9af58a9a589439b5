// Who can reach a daemon's socket (daemon/serve.h): the socket directory and the socket file admit
// exactly the daemon's uid and the allow-listed uids; SO_PEERCRED then decides per connection.
//
// The socket directory:
//  - missing: created 0700 (missing parents as `mkdir -p`), with a marker file (kManagedMarker)
//    that says hoist made it;
//  - existing with the marker (and owned by this uid): hoist made it earlier, so hoist sets its
//    access again for this run's allow-list;
//  - any other existing directory is never changed. It is refused (InvalidArgument) when it is
//    not a directory or is a link, is owned by a uid other than this one or root, or is writable
//    by its group or others without the sticky bit. A shared 1777 /tmp is accepted as it is.
// In a directory hoist manages, each allow-listed uid other than the daemon's own (and root, who
// needs no grant) gets search permission through a POSIX ACL entry (user:U:--x); the socket file
// is 0600 plus user:U:rw- per such uid. Where the file system has no ACLs the directory is 0711
// and the socket 0666 instead: anyone may then connect and SO_PEERCRED alone refuses them.
// Finally every allow-listed uid must be able to reach the directory: a directory on the way
// that lets neither its group nor others search it (and has no ACL) is an InvalidArgument naming
// it, the uid and its mode.
//
// Concurrency: ranks on one node prepare the same directory at once; they serialise on an flock
// of its parent (bounded wait). Failure: a Status naming the path. Threading: any thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "hoist/status.h"

namespace hoist::rank {

// The marker file inside a socket directory hoist created.
inline constexpr const char* kManagedMarker = ".hoist-socket-dir";

// True when `uid` may use the daemon: in `allow`, or (empty list) equal to `self`.
bool UidAllowed(uid_t uid, const std::vector<uid_t>& allow, uid_t self);

// How the listed uids were admitted (for the log and the tests).
enum class Admission {
  kPrivate,    // nobody but the daemon's uid (and root): 0700 / 0600
  kAcl,        // POSIX ACL entries per listed uid
  kModeBits,   // no ACL support: 0711 / 0666, SO_PEERCRED the only gate
  kUnmanaged,  // an existing directory hoist did not create: left as it is
};

// Prepares `dir` as described above for the uids in `allow` (empty: the daemon's own uid only).
Result<Admission> PrepareSocketDir(const std::string& dir, const std::vector<uid_t>& allow = {});

// Sets the access of a freshly bound socket file for `allow` (see above).
Result<Admission> AdmitToSocket(const std::string& path, const std::vector<uid_t>& allow);

}  // namespace hoist::rank
