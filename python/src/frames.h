/* The Python caller of the running C code, for MemoryLogger (frames.c). */
#ifndef MODELMEM_PYTHON_FRAMES_H
#define MODELMEM_PYTHON_FRAMES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const void* code; /* the frame's code object: an identity, valid only during the call */
  int lasti;        /* its instruction index */
} modelmem_py_frame;

/* The innermost Python frame of the calling thread outside PyTorch's and modelmem's own files
 * (the innermost frame when all are); 0 when the thread runs no Python code. No GIL needed. */
int modelmem_py_caller(modelmem_py_frame* out);
/* "file.py:LINE function" of a frame modelmem_py_caller just returned (same callback). */
void modelmem_py_describe(const modelmem_py_frame* frame, char* out, size_t capacity);
/* 1 when this interpreter's frames can be read (CPython 3.11). */
int modelmem_py_frames_supported(void);

#ifdef __cplusplus
}
#endif

#endif
