// torch_npu's PYTORCH_NPU_ALLOC_CONF as the NPU pluggable library reads it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "modelmem/config/config.hpp"
#include "modelmem/config/torch_npu.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::config {
namespace {

std::string npu_error_of(const std::string& text) {
  try {
    translate_torch_npu_conf(text, "PYTORCH_NPU_ALLOC_CONF");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(TorchNpuConf, SharedKeysAreCarriedOverAndParse) {
  std::string t = translate_torch_npu_conf(
      "garbage_collection_threshold:0.6,roundup_power2_divisions:[256:1,512:2,>:4],"
      "per_process_memory_fraction:0.9,max_split_size_mb:64",
      "PYTORCH_NPU_ALLOC_CONF");
  EXPECT_EQ(t,
            "garbage_collection_threshold:0.6,roundup_power2_divisions:[256:1,512:2,>:4],"
            "per_process_memory_fraction:0.9,max_split_size_mb:64");
  Config c = parse_config(t);
  EXPECT_EQ(c.get("max_split_size_mb"), "64");
}

TEST(TorchNpuConf, ExpandableSegmentsFallBackToCachingAsInTorchNpu) {
  std::string t = translate_torch_npu_conf("expandable_segments:True", "PYTORCH_NPU_ALLOC_CONF");
  EXPECT_EQ(t, "expandable_segments:True");  // the default fallback is torch_npu's
  EXPECT_EQ(parse_config(t).get("fallback"), "caching");
  EXPECT_EQ(translate_torch_npu_conf("expandable_segments:False,", "X"),
            "expandable_segments:False");
}

TorchNpuConf read(const std::string& text) {
  return read_torch_npu_conf(text, "PYTORCH_NPU_ALLOC_CONF");
}

// The strings of the journeys issue, each a configuration torch_npu accepts: each builds, and a
// key modelmem cannot honour says in one note what modelmem does instead.
TEST(TorchNpuConf, EveryKeyTorchNpuAcceptsBuildsWithOneNoteWhereMapped) {
  struct Case {
    const char* text;
    const char* modelmem;
    const char* note;  // "" = honoured, no note
  };
  const Case cases[] = {
      {"page_size:1g", "", "page_size:1g: no 1 GiB pages"},
      {"large_segment_size_mb:64", "large_segment_size_mb:64", ""},
      {"expandable_segments:True,base_addr_aligned_kb:16", "expandable_segments:True",
       "base_addr_aligned_kb:16: blocks stay 512-byte aligned"},
      {"expandable_segments:True,base_addr_aligned_kb:0", "expandable_segments:True", ""},
      {"base_addr_aligned_kb:16", "", ""},  // torch_npu applies it with expandable segments only
      {"expandable_segments:False,multi_stream_lazy_reclaim:True", "expandable_segments:False",
       "multi_stream_lazy_reclaim:True: nothing to defer"},
      {"multi_stream_lazy_reclaim:False", "", ""},
      {"expandable_segments:True,segment_size_mb:40", "expandable_segments:True",
       "segment_size_mb:40: expandable segments map the large pool in the device's 2 MiB pages"},
      {"expandable_segments:True,large_segment_size_mb:64",
       "expandable_segments:True,large_segment_size_mb:64",
       "large_segment_size_mb:64: expandable segments map the large pool"},
      {"release_lock_on_npumalloc:True", "", "release_lock_on_npumalloc:True: not applied"},
      {"throw_on_npumalloc_oom:True", "", "throw_on_npumalloc_oom:True: modelmem returns NULL"},
      {"pin_memory_expandable_segments:True,pinned_mem_register:False", "",
       "pin_memory_expandable_segments:True: host pinned memory"},
      {"pinned_use_background_threads:True", "", "host pinned memory"},
      {"max_non_split_rounding_mb:40", "", "max_non_split_rounding_mb:40: not applied"},
      {"per_process_memory_fraction:0", "", ""},  // torch_npu's "unset"
      {"per_process_memory_fraction:0.5,garbage_collection_threshold:0.6",
       "per_process_memory_fraction:0.5,garbage_collection_threshold:0.6", ""},
  };
  for (const Case& c : cases) {
    const TorchNpuConf t = read(c.text);
    EXPECT_EQ(t.text, c.modelmem) << c.text;
    EXPECT_NO_THROW(parse_config(t.text)) << c.text;
    if (*c.note == '\0') {
      EXPECT_TRUE(t.notes.empty()) << c.text << ": " << (t.notes.empty() ? "" : t.notes[0]);
      continue;
    }
    ASSERT_EQ(t.notes.size(), c.text == std::string("pin_memory_expandable_segments:True,"
                                                    "pinned_mem_register:False")
                                  ? 2u
                                  : 1u)
        << c.text;
    EXPECT_EQ(t.notes[0].rfind("PYTORCH_NPU_ALLOC_CONF: ", 0), 0u) << t.notes[0];
    EXPECT_NE(t.notes[0].find(c.note), std::string::npos) << t.notes[0];
    EXPECT_EQ(t.notes[0].find('\n'), std::string::npos) << "one line: " << t.notes[0];
  }
}

TEST(TorchNpuConf, WhatTorchNpuRefusesIsRefusedWithItsReason) {
  // torch_npu's own check, with its words.
  for (const char* text : {"expandable_segments:True,max_split_size_mb:64",
                           "garbage_collection_threshold:0.6,expandable_segments:True"})
    EXPECT_NE(npu_error_of(text).find("`max_split_size_mb` or `garbage_collection_threshold`, "
                                      "cannot be enabled with `expandable_segments`"),
              std::string::npos)
        << text;
  EXPECT_NE(npu_error_of("page_size:2m")
                .find("page_size:2m: torch_npu refuses it too (page_size "
                      "takes only 1g)"),
            std::string::npos);
  EXPECT_NE(npu_error_of("base_addr_aligned_kb:32").find("[0, 16]"), std::string::npos);
  EXPECT_NE(npu_error_of("segment_size_mb:10").find("[20, 512]"), std::string::npos);
  EXPECT_NE(npu_error_of("multi_stream_lazy_reclaim:yes").find("expected True or False"),
            std::string::npos);
  // torch_npu (c10) takes True or False only, not modelmem's other spellings.
  EXPECT_NE(npu_error_of("expandable_segments:true")
                .find("expandable_segments:true: torch_npu "
                      "refuses it too (expected True or False)"),
            std::string::npos);
  EXPECT_NE(npu_error_of("bogus:1").find("unknown key 'bogus' (torch_npu refuses it too; keys: "
                                         "expandable_segments"),
            std::string::npos);
  EXPECT_NE(npu_error_of("backend:native").find("unknown key 'backend'"), std::string::npos);
  EXPECT_NE(npu_error_of("expandable_segments").find("missing ':VALUE'"), std::string::npos);
  // max_split_size_mb without expandable segments is torch_npu's and modelmem's alike.
  EXPECT_EQ(npu_error_of("expandable_segments:False,max_split_size_mb:64"), "");
}

TEST(TorchNpuConf, EnvironmentOrder) {
  unsetenv("MODELMEM_ALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True", 1);
  EnvironmentConf c = environment_conf();
  EXPECT_EQ(c.variable, "PYTORCH_NPU_ALLOC_CONF");
  EXPECT_TRUE(c.translated);
  EXPECT_EQ(c.text, "expandable_segments:True");
  EXPECT_TRUE(c.notes.empty());
  setenv("PYTORCH_NPU_ALLOC_CONF", "page_size:1g", 1);
  c = environment_conf();
  EXPECT_EQ(c.text, "");
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_EQ(c.notes[0].rfind("PYTORCH_NPU_ALLOC_CONF: page_size:1g: ", 0), 0u);
  setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:64", 1);
  EXPECT_THROW(environment_conf(), InvalidInput);  // both set
  unsetenv("PYTORCH_NPU_ALLOC_CONF");
  EXPECT_EQ(environment_conf().text, "max_split_size_mb:64");
  setenv("MODELMEM_ALLOC_CONF", "strategy:static,static_pool_mb:64", 1);
  c = environment_conf();  // modelmem's own string wins
  EXPECT_EQ(c.variable, "MODELMEM_ALLOC_CONF");
  EXPECT_FALSE(c.translated);
  EXPECT_EQ(c.text, "strategy:static,static_pool_mb:64");
  unsetenv("MODELMEM_ALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  EXPECT_EQ(environment_conf().text, "");
  EXPECT_EQ(environment_conf().variable, "");
}

}  // namespace
}  // namespace modelmem::config
