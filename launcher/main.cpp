// sluice: one executable, one subcommand per job. It links no libtorch: train, doctor and bench
// are handed to sluice-train before anything else happens (launch.h says why; train_binary.h how).
#include "launcher/launch.h"
#include "launcher/train_binary.h"

int main(int argc, char** argv) {
  if (sluice::launcher::needs_torch(argc, argv)) return sluice::launcher::exec_train_binary(argc, argv);
  return sluice::launcher::launch(argc, argv, nullptr);
}
