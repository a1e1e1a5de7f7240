// The failure barrier of mesh/fail_together.h.
#include "mesh/fail_together.h"

#include <mpi.h>

#include <string>

#include "mesh/agree.h"

namespace tessera::detail {

const Mesh* failure_mesh(const Mesh& mesh) {
  if (!mesh.valid() || mesh.size() == 1) return nullptr;
  (void)mesh.failure_comm();
  return &mesh;
}

void wait_for_every_rank_to_throw(const char* what, const char* where_others_are, const Mesh& mesh,
                                  const std::exception_ptr& thrown) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(mesh.failure_comm().handle(), &request) == MPI_SUCCESS && wait_until_done(request)) return;
  abort_with_error(mesh.comm(),
                   std::string(what) + " threw on this rank and the other ranks did not throw within " +
                       std::to_string(failed_rank_wait_seconds()) + " s (" +
                       where_others_are + "); ending the job: ",
                   thrown);
}

}  // namespace tessera::detail
