// The guest agent (agent.h): an EXEC request's fields, parsed and checked into a struct
// exec_req, every field checked against the protocol's bounds before anything runs.
#include "backend/microvm/guest/agent.h"

void free_exec_req(struct exec_req* r) {
  for (int i = 0; i < r->argc; i++) free(r->argv[i]);
  for (int i = 0; i < r->envc; i++) free(r->env[i]);
  free(r->argv);
  free(r->env);
  free(r->shell);
  free(r->cwd);
  free(r->root);
}

// Parses EXEC's fields; 0 or -1 with a message in why.
int parse_exec_req(const struct fieldref* f, int nf, struct exec_req* r, char* why, size_t wn) {
  memset(r, 0, sizeof *r);
  r->out_limit = kDefaultOutputLimit;
  r->argv = calloc(kMaxArgs + 1, sizeof(char*));
  r->env = calloc(kMaxArgs + 1, sizeof(char*));
  if (!r->argv || !r->env) {
    snprintf(why, wn, "out of memory");
    return -1;
  }
  int have_timeout = 0, have_mem = 0, have_in = 0, have_limit = 0;
  int have_u32[3] = {0, 0, 0};  // pids_limit, nofile, term_grace_ms
  for (int i = 0; i < nf; i++) {
    switch (f[i].tag) {
      case kArgv:
      case kEnv: {
        int* c = f[i].tag == kArgv ? &r->argc : &r->envc;
        char** v = f[i].tag == kArgv ? r->argv : r->env;
        if (*c == kMaxArgs) {
          snprintf(why, wn, "more than %d %s entries", kMaxArgs,
                   f[i].tag == kArgv ? "argv" : "env");
          return -1;
        }
        char* s = field_cstr(&f[i]);
        if (!s) {
          snprintf(why, wn, "%s entry %d holds a NUL byte", f[i].tag == kArgv ? "argv" : "env", *c);
          return -1;
        }
        if (f[i].tag == kEnv && (!strchr(s, '=') || s[0] == '=')) {
          snprintf(why, wn, "env entry %d is not NAME=VALUE", *c);
          free(s);
          return -1;
        }
        v[(*c)++] = s;
        break;
      }
      case kShell:
      case kCwd: {
        char** dst = f[i].tag == kShell ? &r->shell : &r->cwd;
        if (*dst) {
          snprintf(why, wn, "%s given twice", f[i].tag == kShell ? "shell" : "cwd");
          return -1;
        }
        *dst = field_cstr(&f[i]);
        if (!*dst) {
          snprintf(why, wn, "%s holds a NUL byte", f[i].tag == kShell ? "shell" : "cwd");
          return -1;
        }
        break;
      }
      case kTimeoutMs:
        if (f[i].n != 4 || have_timeout++) {
          snprintf(why, wn, "timeout_ms: want one u32");
          return -1;
        }
        r->timeout_ms = (uint32_t)get_le(f[i].d, 4);
        break;
      case kMemLimit:
        if (f[i].n != 8 || have_mem++) {
          snprintf(why, wn, "memory_limit: want one u64");
          return -1;
        }
        r->mem_limit = get_le(f[i].d, 8);
        break;
      case kStdin:
        if (have_in++) {
          snprintf(why, wn, "stdin given twice");
          return -1;
        }
        r->in = f[i].d;
        r->in_len = f[i].n;
        break;
      case kOutputLimit:
        if (f[i].n != 4 || have_limit++) {
          snprintf(why, wn, "output_limit: want one u32");
          return -1;
        }
        r->out_limit = (uint32_t)get_le(f[i].d, 4);
        if (r->out_limit > kMaxOutputLimit) {
          snprintf(why, wn, "output_limit over %d", kMaxOutputLimit);
          return -1;
        }
        break;
      case kRoot:
        if (r->root) {
          snprintf(why, wn, "root given twice");
          return -1;
        }
        r->root = field_cstr(&f[i]);
        if (!r->root) {
          snprintf(why, wn, "root holds a NUL byte");
          return -1;
        }
        if (r->root[0] != '/' || f[i].n > 200) {
          snprintf(why, wn, "root must be an absolute path of at most 200 bytes");
          return -1;
        }
        break;
      case kUid:
      case kGid: {
        int* have = f[i].tag == kUid ? &r->have_uid : &r->have_gid;
        const char* what = f[i].tag == kUid ? "uid" : "gid";
        if (f[i].n != 4 || (*have)++) {
          snprintf(why, wn, "%s: want one u32", what);
          return -1;
        }
        uint32_t v = (uint32_t)get_le(f[i].d, 4);
        if (v == UINT32_MAX) {
          snprintf(why, wn, "%s 4294967295 is not an id", what);
          return -1;
        }
        *(f[i].tag == kUid ? &r->uid : &r->gid) = v;
        break;
      }
      case kPidsLimit:
      case kNofile:
      case kTermGraceMs: {
        int k = (int)f[i].tag - kPidsLimit;
        const char* what = k == 0 ? "pids_limit" : k == 1 ? "nofile" : "term_grace_ms";
        uint32_t* dst = k == 0 ? &r->pids_limit : k == 1 ? &r->nofile : &r->term_grace_ms;
        if (f[i].n != 4 || have_u32[k]++) {
          snprintf(why, wn, "%s: want one u32", what);
          return -1;
        }
        *dst = (uint32_t)get_le(f[i].d, 4);
        break;
      }
      default:
        snprintf(why, wn, "unknown exec field %u", f[i].tag);
        return -1;
    }
  }
  if (!!r->shell == !!r->argc) {
    snprintf(why, wn, "exec needs argv or shell, exactly one");
    return -1;
  }
  if (r->shell) {
    r->argv[0] = strdup("/bin/sh");
    r->argv[1] = strdup("-c");
    r->argv[2] = r->shell;
    r->shell = NULL;
    r->argc = 3;
    if (!r->argv[0] || !r->argv[1]) {
      snprintf(why, wn, "out of memory");
      return -1;
    }
  } else if (r->argv[0][0] == 0) {
    snprintf(why, wn, "argv[0] is empty");
    return -1;
  }
  if (r->mem_limit && r->mem_limit < 1 << 20) {
    snprintf(why, wn, "memory_limit under 1 MiB");
    return -1;
  }
  return 0;
}
