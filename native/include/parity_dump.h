/* parity_dump.h: read a scenario's inputs and write a dump for ssd-parity, from C99 (or C++), no dependencies.

   Inputs: `python -m parity inputs --scenario S --batch-size B --out IN` writes IN/index.txt, one tensor a line
   ("name dtype file rank d0 d1 ...") and one raw little-endian file per tensor. A dump: DIR/manifest.json and one
   raw file per tensor (parity/dump.py); this header writes both, each tensor's sha256 in the manifest and the
   checksums of the inputs it read, so that the harness can refuse a dump computed on other inputs.

   In exactly one translation unit: #define PARITY_DUMP_IMPLEMENTATION before #include "parity_dump.h".
   Every function returns 0 on success, else -1 with a message in pd_error (one line, names the file). */
#ifndef PARITY_DUMP_H
#define PARITY_DUMP_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PD_MAX_RANK 8
#define PD_MAX_TENSORS 512

typedef struct {
  char name[128], dtype[8], file[256];
  int rank;
  int64_t dims[PD_MAX_RANK];
} pd_entry;

typedef struct {
  pd_entry entries[PD_MAX_TENSORS];
  char sha256[PD_MAX_TENSORS][65]; /* of each tensor read, for the dump's "inputs" */
  int count;
  char dir[768];
} pd_inputs;

typedef struct {
  FILE* manifest;
  char dir[768];
  int count;
} pd_writer;

extern char pd_error[2048];

int pd_read_index(pd_inputs* in, const char* dir);
const pd_entry* pd_find(const pd_inputs* in, const char* name); /* NULL if absent */
int64_t pd_numel(const pd_entry* e);
/* Reads the tensor's file into a malloc'd buffer (the caller frees it); its byte count must match dtype x dims. */
void* pd_read(pd_inputs* in, const pd_entry* e);

int pd_open(pd_writer* w, const char* dir, const char* scenario, int batch_size);
/* dtype "float32", "float64", "int64", "int32" or "uint8"; data in C order, little-endian (x86). */
int pd_write(pd_writer* w, const char* name, const char* dtype, int rank, const int64_t* dims, const void* data);
int pd_close(pd_writer* w, const pd_inputs* inputs); /* inputs: recorded by checksum, or NULL */

#ifdef PARITY_DUMP_IMPLEMENTATION
#include <stdlib.h>
#include <string.h>

char pd_error[2048];

/* SHA-256 (FIPS 180-4), for the manifest's checksums. */
typedef struct { uint32_t h[8]; uint8_t block[64]; size_t used; uint64_t bits; } pd_sha;
static const uint32_t pd_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};
#define PD_ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
static void pd_sha_block(pd_sha* s) {
  uint32_t w[64], v[8];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t)s->block[4 * i] << 24 | (uint32_t)s->block[4 * i + 1] << 16 | (uint32_t)s->block[4 * i + 2] << 8 |
           s->block[4 * i + 3];
  for (int i = 16; i < 64; ++i)
    w[i] = w[i - 16] + (PD_ROR(w[i - 15], 7) ^ PD_ROR(w[i - 15], 18) ^ (w[i - 15] >> 3)) + w[i - 7] +
           (PD_ROR(w[i - 2], 17) ^ PD_ROR(w[i - 2], 19) ^ (w[i - 2] >> 10));
  memcpy(v, s->h, sizeof v);
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = v[7] + (PD_ROR(v[4], 6) ^ PD_ROR(v[4], 11) ^ PD_ROR(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) +
                  pd_k[i] + w[i];
    uint32_t t2 = (PD_ROR(v[0], 2) ^ PD_ROR(v[0], 13) ^ PD_ROR(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
    memmove(v + 1, v, 7 * sizeof v[0]);
    v[4] += t1, v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; ++i) s->h[i] += v[i];
}
static void pd_sha_hex(const void* data, size_t n, char out[65]) {
  pd_sha s = {{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}, {0}, 0, 0};
  const uint8_t* p = (const uint8_t*)data;
  s.bits = (uint64_t)n * 8;
  for (size_t i = 0; i < n; ++i) {
    s.block[s.used++] = p[i];
    if (s.used == 64) pd_sha_block(&s), s.used = 0;
  }
  s.block[s.used++] = 0x80;
  if (s.used > 56) { memset(s.block + s.used, 0, 64 - s.used); pd_sha_block(&s); s.used = 0; }
  memset(s.block + s.used, 0, 56 - s.used);
  for (int i = 0; i < 8; ++i) s.block[56 + i] = (uint8_t)(s.bits >> (56 - 8 * i));
  pd_sha_block(&s);
  for (int i = 0; i < 8; ++i) sprintf(out + 8 * i, "%08x", s.h[i]);
}

static size_t pd_itemsize(const char* dtype) {
  if (!strcmp(dtype, "float64") || !strcmp(dtype, "int64")) return 8;
  if (!strcmp(dtype, "float32") || !strcmp(dtype, "int32")) return 4;
  return strcmp(dtype, "uint8") ? 0 : 1;
}

int64_t pd_numel(const pd_entry* e) {
  int64_t n = 1;
  for (int i = 0; i < e->rank; ++i) n *= e->dims[i];
  return n;
}

int pd_read_index(pd_inputs* in, const char* dir) {
  char path[1024], line[1024];
  snprintf(in->dir, sizeof in->dir, "%s", dir);
  snprintf(path, sizeof path, "%s/index.txt", dir);
  FILE* f = fopen(path, "r");
  if (!f) return snprintf(pd_error, sizeof pd_error, "%s: cannot open (python -m parity inputs writes it)", path), -1;
  in->count = 0;
  memset(in->sha256, 0, sizeof in->sha256);
  while (fgets(line, sizeof line, f)) {
    pd_entry* e = &in->entries[in->count];
    int used = 0;
    if (in->count == PD_MAX_TENSORS || sscanf(line, "%127s %7s %255s %d%n", e->name, e->dtype, e->file, &e->rank, &used) != 4 ||
        e->rank < 0 || e->rank > PD_MAX_RANK || !pd_itemsize(e->dtype)) {
      fclose(f);
      return snprintf(pd_error, sizeof pd_error, "%s: line %d is not 'name dtype file rank dims...'", path, in->count + 1), -1;
    }
    for (int i = 0; i < e->rank; ++i) {
      int more = 0;
      long long d = -1;
      if (sscanf(line + used, "%lld%n", &d, &more) != 1 || d < 0) {
        fclose(f);
        return snprintf(pd_error, sizeof pd_error, "%s: tensor %s: dimension %d is missing or negative", path, e->name, i), -1;
      }
      e->dims[i] = d, used += more;
    }
    in->count++;
  }
  fclose(f);
  return 0;
}

const pd_entry* pd_find(const pd_inputs* in, const char* name) {
  for (int i = 0; i < in->count; ++i)
    if (!strcmp(in->entries[i].name, name)) return &in->entries[i];
  return NULL;
}

void* pd_read(pd_inputs* in, const pd_entry* e) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", in->dir, e->file);
  size_t bytes = (size_t)pd_numel(e) * pd_itemsize(e->dtype);
  FILE* f = fopen(path, "rb");
  if (!f) {
    snprintf(pd_error, sizeof pd_error, "%s: cannot open", path);
    return NULL;
  }
  char* data = (char*)malloc(bytes + 1); /* one more byte: a longer file is caught */
  size_t got = data ? fread(data, 1, bytes + 1, f) : 0;
  fclose(f);
  if (!data || got != bytes) {
    free(data);
    snprintf(pd_error, sizeof pd_error, "%s: %s %zu bytes of %s", path, data ? "not the" : "no memory for", bytes, e->name);
    return NULL;
  }
  pd_sha_hex(data, bytes, in->sha256[e - in->entries]);
  return data;
}

int pd_open(pd_writer* w, const char* dir, const char* scenario, int batch_size) {
  char path[1024];
  snprintf(w->dir, sizeof w->dir, "%s", dir);
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  w->count = 0;
  w->manifest = fopen(path, "w");
  if (!w->manifest) return snprintf(pd_error, sizeof pd_error, "%s: cannot create (does the directory exist?)", path), -1;
  fprintf(w->manifest, "{\"format\": \"ssd-parity-dump/1\", \"scenario\": \"%s\", \"batch_size\": %d, \"tensors\": [",
          scenario, batch_size);
  return 0;
}

int pd_write(pd_writer* w, const char* name, const char* dtype, int rank, const int64_t* dims, const void* data) {
  char file[512], path[1536], hex[65];
  size_t n = 0, bytes = pd_itemsize(dtype);
  for (const char* c = name; *c && n < sizeof file - 5; ++c) file[n++] = *c == '/' ? '_' : *c; /* grad/x -> grad_x */
  memcpy(file + n, ".bin", 5);
  for (int i = 0; i < rank; ++i) bytes *= (size_t)dims[i];
  snprintf(path, sizeof path, "%s/%s", w->dir, file);
  FILE* f = fopen(path, "wb");
  if (!f) return snprintf(pd_error, sizeof pd_error, "%s: cannot create", path), -1;
  size_t put = fwrite(data, 1, bytes, f);
  if (fclose(f) || put != bytes) return snprintf(pd_error, sizeof pd_error, "%s: write failed", path), -1;
  pd_sha_hex(data, bytes, hex);
  fprintf(w->manifest, "%s\n {\"name\": \"%s\", \"file\": \"%s\", \"dtype\": \"%s\", \"sha256\": \"%s\", \"shape\": [",
          w->count++ ? "," : "", name, file, dtype, hex);
  for (int i = 0; i < rank; ++i) fprintf(w->manifest, "%s%lld", i ? ", " : "", (long long)dims[i]);
  fprintf(w->manifest, "]}");
  return 0;
}

int pd_close(pd_writer* w, const pd_inputs* inputs) {
  fprintf(w->manifest, "]");
  if (inputs) {
    const char* separator = "";
    fprintf(w->manifest, ",\n \"inputs\": {");
    for (int i = 0; i < inputs->count; ++i)
      if (inputs->sha256[i][0]) { /* only the inputs this port read */
        fprintf(w->manifest, "%s\"%s\": \"%s\"", separator, inputs->entries[i].name, inputs->sha256[i]);
        separator = ", ";
      }
    fprintf(w->manifest, "}");
  }
  fprintf(w->manifest, "}\n");
  return fclose(w->manifest) ? (snprintf(pd_error, sizeof pd_error, "%s/manifest.json: write failed", w->dir), -1) : 0;
}
#endif /* PARITY_DUMP_IMPLEMENTATION */
#endif /* PARITY_DUMP_H */
