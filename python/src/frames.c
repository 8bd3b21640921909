/* The Python caller of an allocation, read from the calling thread's own frame stack without the
 * GIL. The allocating thread is inside C code (PyTorch releases the GIL around its operators),
 * so its frame stack cannot change while it is read; every frame on it holds a strong reference
 * to its code object. Only fields are read (no allocation, no reference counting, no C-API call
 * that needs the GIL), which is why this uses CPython 3.11's internal frame layout. */
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#include <internal/pycore_frame.h>
#define MODELMEM_HAVE_FRAMES 1
#endif

#include <stdio.h>
#include <string.h>

#include "frames.h"

#ifdef MODELMEM_HAVE_FRAMES
/* An ASCII str's characters, or NULL (other strings are not read without the GIL). */
static const char* ascii_of(PyObject* s) {
  if (s == NULL || !PyUnicode_Check(s) || !PyUnicode_IS_COMPACT_ASCII(s)) return NULL;
  return (const char*)PyUnicode_DATA(s);
}

static int is_library_file(const char* file) {
  return strstr(file, "/torch/") != NULL || strstr(file, "/modelmem/") != NULL ||
         strncmp(file, "<frozen", 7) == 0;
}
#endif

int modelmem_py_caller(modelmem_py_frame* out) {
#ifdef MODELMEM_HAVE_FRAMES
  PyThreadState* ts = PyGILState_GetThisThreadState();
  if (ts == NULL || ts->cframe == NULL) return 0;
  _PyInterpreterFrame* first = NULL;
  _PyInterpreterFrame* chosen = NULL;
  _PyInterpreterFrame* f = ts->cframe->current_frame;
  for (int depth = 0; f != NULL && depth < 64 && chosen == NULL; f = f->previous, ++depth) {
    if (f->f_code == NULL || _PyFrame_IsIncomplete(f)) continue;
    const char* file = ascii_of(f->f_code->co_filename);
    if (file == NULL) continue;
    if (first == NULL) first = f;
    if (!is_library_file(file)) chosen = f;
  }
  f = chosen != NULL ? chosen : first;
  if (f == NULL) return 0;
  out->code = f->f_code;
  out->lasti = _PyInterpreterFrame_LASTI(f);
  return 1;
#else
  (void)out;
  return 0;
#endif
}

void modelmem_py_describe(const modelmem_py_frame* frame, char* out, size_t capacity) {
#ifdef MODELMEM_HAVE_FRAMES
  PyCodeObject* code = (PyCodeObject*)frame->code;
  const char* file = ascii_of(code->co_filename);
  const char* name = ascii_of(code->co_name);
  const char* base = file != NULL ? strrchr(file, '/') : NULL;
  base = base != NULL ? base + 1 : (file != NULL ? file : "?");
  int line = PyCode_Addr2Line(code, frame->lasti * (int)sizeof(_Py_CODEUNIT));
  snprintf(out, capacity, "%s:%d %s", base, line, name != NULL ? name : "?");
  for (char* c = out; *c != '\0'; ++c)
    if (*c == ',' || (unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = ' ';
  /* The trace CSV trims its fields; so does the label. */
  size_t n = strlen(out);
  while (n > 0 && out[n - 1] == ' ') out[--n] = '\0';
#else
  (void)frame;
  snprintf(out, capacity, "?");
#endif
}

int modelmem_py_frames_supported(void) {
#ifdef MODELMEM_HAVE_FRAMES
  return 1;
#else
  return 0;
#endif
}
