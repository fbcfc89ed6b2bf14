/* A fake libnvrtc for cuda/nvrtc's binding test (built with cc when one is
 * installed): the real entry points' signatures; a "cubin" is "\x7fELF"
 * followed by what the program was given, '|'-separated, so the test can
 * check every string and array crossed the call intact. A source holding
 * "#error" fails to compile with a log. fake_live counts programs not yet
 * destroyed. */
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *out;
    size_t n;
    char *log;
} prog;

static int live;

static void add(prog *q, const char *s) {
    size_t l = strlen(s);
    q->out = realloc(q->out, q->n + l + 1);
    memcpy(q->out + q->n, s, l);
    q->n += l;
    q->out[q->n] = 0;
}

int fake_live(void) { return __atomic_load_n(&live, __ATOMIC_SEQ_CST); }

int nvrtcVersion(int *major, int *minor) {
    *major = 12;
    *minor = 8;
    return 0;
}

const char *nvrtcGetErrorString(int r) {
    switch (r) {
    case 0: return "NVRTC_SUCCESS";
    case 3: return "NVRTC_ERROR_INVALID_INPUT";
    case 6: return "NVRTC_ERROR_COMPILATION";
    }
    return "NVRTC_ERROR_FAKE";
}

int nvrtcCreateProgram(prog **p, const char *src, const char *name, int nh, const char *const *headers, const char *const *names) {
    if (!p || !src || !name || nh < 0) return 3;
    prog *q = calloc(1, sizeof *q);
    add(q, "\x7f" "ELF|");
    add(q, name);
    add(q, "|");
    add(q, src);
    for (int i = 0; i < nh; i++) {
        add(q, "|");
        add(q, names[i]);
        add(q, "=");
        add(q, headers[i]);
    }
    __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
    *p = q;
    return 0;
}

int nvrtcCompileProgram(prog *q, int n, const char *const *opts) {
    if (!q) return 3;
    if (strstr(q->out, "#error")) {
        q->log = strdup("fake.cu(1): error: planted\n");
        return 6;
    }
    for (int i = 0; i < n; i++) {
        add(q, "|");
        add(q, opts[i]);
    }
    q->log = strdup("fake: compiled\n");
    return 0;
}

int nvrtcGetProgramLogSize(prog *q, size_t *n) {
    *n = q->log ? strlen(q->log) + 1 : 1;
    return 0;
}

int nvrtcGetProgramLog(prog *q, char *buf) {
    strcpy(buf, q->log ? q->log : "");
    return 0;
}

int nvrtcGetCUBINSize(prog *q, size_t *n) {
    *n = q->n;
    return 0;
}

int nvrtcGetCUBIN(prog *q, char *buf) {
    memcpy(buf, q->out, q->n);
    return 0;
}

int nvrtcDestroyProgram(prog **p) {
    if (!p || !*p) return 3;
    free((*p)->out);
    free((*p)->log);
    free(*p);
    *p = 0;
    __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
    return 0;
}
