"""scripts/check-layers: the real tree keeps the house rules, and each kind of breach is caught
and named (a wrong-way include, a file over 600 lines, a flat public header, a public header
docs/architecture.md does not name, a test in another layer's folder)."""
import os
import subprocess
import sys

SOURCE = os.environ.get("MODELMEM_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(SOURCE, "scripts", "check-layers")


def check(root):
    return subprocess.run([sys.executable, SCRIPT, "--root", str(root)], capture_output=True,
                          text=True)


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_tree_keeps_the_rules():
    r = check(SOURCE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no file over 600 lines" in r.stdout


def test_a_clean_tree_passes(tmp_path):
    write(tmp_path, "src/alloc/ok.cpp", '#include "modelmem/device/device.hpp"\n'
          '#include "modelmem/core/error.hpp"\n#include "local.hpp"\n')
    write(tmp_path, "include/modelmem/modelmem.hpp", "#pragma once\n")
    write(tmp_path, "integrations/preload/c_abi.cpp", "int x;\n" * 600)
    r = check(tmp_path)
    assert r.returncode == 0, r.stdout


def test_each_breach_is_named(tmp_path):
    write(tmp_path, "src/device/host.cpp", '#include <cstdio>\n#include "modelmem/alloc/allocator.hpp"\n')
    write(tmp_path, "src/plan/solver.cpp", '#include "modelmem/trace/trace.hpp"\n')
    write(tmp_path, "src/alloc/caching.cpp", '#include "modelmem/model/graph.hpp"\n')
    write(tmp_path, "integrations/preload/preload.cpp", "int x;\n" * 601)
    write(tmp_path, "include/modelmem/flat.hpp", "#pragma once\n")
    write(tmp_path, "include/modelmem/modelmem.hpp", "#pragma once\n")
    write(tmp_path, "include/modelmem/plan/problem.hpp", '#include "modelmem/alloc/stats.hpp"\n')
    write(tmp_path, "docs/architecture.md", "| a problem | `plan/problem.hpp` |\n")
    # Above the layers: a private header of src/, and (tools/) one of integrations/.
    write(tmp_path, "src/alloc/caching/impl.hpp", "#pragma once\n")
    write(tmp_path, "python/src/torch.cpp", '#include "alloc/caching/impl.hpp"\n')
    write(tmp_path, "integrations/preload/stack.hpp", "#pragma once\n")
    write(tmp_path, "tools/run.cpp", '#include "command.hpp"\n#include "stack.hpp"\n'
          '#include "modelmem_preload/preflight.hpp"\n')
    write(tmp_path, "tools/command.hpp", "#pragma once\n")
    r = check(tmp_path)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert "src/device/host.cpp:2: includes alloc/allocator.hpp: src/device may include only core, device" in lines
    assert any(l.startswith("src/plan/solver.cpp:1: includes trace/trace.hpp") for l in lines)
    assert any(l.startswith("src/alloc/caching.cpp:1: includes model/graph.hpp") for l in lines)
    assert "integrations/preload/preload.cpp: 601 lines (at most 600)" in lines
    assert "include/modelmem/flat.hpp: a public header outside a layer's folder" in lines
    assert ("include/modelmem/plan/problem.hpp:1: includes alloc/stats.hpp: src/plan may include "
            "only core, plan") in lines
    assert ("python/src/torch.cpp:1: includes alloc/caching/impl.hpp, a private header of src/ "
            "(use the public modelmem/ headers)") in lines
    assert ("tools/run.cpp:2: includes stack.hpp: tools/ includes only modelmem/ and "
            "modelmem_preload/ headers and its own") in lines
    assert len(lines) == 8, lines


def test_an_undocumented_public_header_and_a_test_in_another_layers_folder_are_named(tmp_path):
    write(tmp_path, "include/modelmem/modelmem.hpp", "#pragma once\n")
    write(tmp_path, "include/modelmem/plan/problem.hpp", "#pragma once\n")
    write(tmp_path, "include/modelmem/plan/period.hpp", "#pragma once\n")
    write(tmp_path, "docs/architecture.md", "| a problem | `plan/problem.hpp` |\n")
    # A model test that reaches the config layer (through a header of its folder), a sizing
    # test of the model layer alone, and tests where they belong (a test of the tool alone too).
    write(tmp_path, "tests/model/helper.hpp", '#include "modelmem/config/config.hpp"\n')
    write(tmp_path, "tests/model/plan_test.cpp", '#include "modelmem/model/graph.hpp"\n'
          '#include "helper.hpp"\n')
    write(tmp_path, "tests/sizing/checkpoint_test.cpp", '#include "modelmem/core/error.hpp"\n'
          '#include "modelmem/model/checkpoint.hpp"\n')
    write(tmp_path, "tests/sizing/device_test.cpp", '#include "modelmem/model/plan_model.hpp"\n'
          '#include "modelmem/config/config.hpp"\n')
    write(tmp_path, "tests/alloc/cli_test.cpp", '#include "support/command.hpp"\n')
    write(tmp_path, "tests/model/graph_test.cpp", '#include "modelmem/model/graph.hpp"\n')
    r = check(tmp_path)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert ("include/modelmem/plan/period.hpp: a public header docs/architecture.md does not name "
            "(its table of where each concept lives)") in lines
    assert ("tests/model/plan_test.cpp:2: includes config/config.hpp: a test of model/ uses only "
            "core, model, plan (it belongs in tests/sizing/)") in lines
    assert "tests/sizing/checkpoint_test.cpp: uses only core, model: it belongs in tests/model/" in lines
    assert len(lines) == 3, lines
