// A qemu-user TCG plugin that counts the guest instructions a program executes: bench/aarch64
// loads it into `qemu-aarch64 -plugin libqemu_insn_count.so,out=FILE` to compare the instructions
// edgeshare and llama.cpp spend per generated token where no ARM board is at hand.
//
// Each translated block adds its instruction count to one counter every time it runs (qemu's inline
// add, no call per block); at exit the total goes to `out=FILE` (else stderr) as one decimal line.
// The counter is not atomic: with several guest threads running at once counts may be lost, so the
// bench runs its programs on one thread.
//
// Debian ships qemu-user without qemu-plugin.h, so the few entry points used here are declared
// below as qemu's plugin ABI (version 1, qemu 7.2) defines them.

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

extern "C" {

typedef uint64_t qemu_plugin_id_t;
struct qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb* tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void* userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb* tb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb* tb, enum qemu_plugin_op op,
                                              void* ptr, uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void* userdata);

__attribute__((visibility("default"))) extern const int qemu_plugin_version;
const int qemu_plugin_version = 1;

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const struct qemu_info_t* info,
                                                               int argc, char** argv);

}  // extern "C"

namespace {

uint64_t executed = 0;
char out_path[4096] = {0};

void on_translate(qemu_plugin_id_t, struct qemu_plugin_tb* tb) {
  qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed,
                                           qemu_plugin_tb_n_insns(tb));
}

void on_exit(qemu_plugin_id_t, void*) {
  std::FILE* f = out_path[0] != 0 ? std::fopen(out_path, "w") : stderr;
  if (f == nullptr) {
    std::fprintf(stderr, "qemu_insn_count: cannot write %s\n", out_path);
    return;
  }
  std::fprintf(f, "%" PRIu64 "\n", executed);
  if (f != stderr) std::fclose(f);
}

}  // namespace

int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info_t*, int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "out=", 4) != 0) {
      std::fprintf(stderr, "qemu_insn_count: unknown argument '%s' (it takes out=FILE)\n", argv[i]);
      return -1;
    }
    std::snprintf(out_path, sizeof out_path, "%s", argv[i] + 4);
  }
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  qemu_plugin_register_atexit_cb(id, on_exit, nullptr);
  return 0;
}
