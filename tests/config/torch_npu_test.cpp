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
  // torch_npu refuses this combination; so does modelmem's parser, naming the key.
  try {
    parse_config(translate_torch_npu_conf("expandable_segments:True,max_split_size_mb:64",
                                          "PYTORCH_NPU_ALLOC_CONF"));
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("max_split_size_mb"), std::string::npos);
  }
}

TEST(TorchNpuConf, OtherKeysAreRefusedByNameWithWhatToUse) {
  EXPECT_NE(npu_error_of("page_size:1g").find("PYTORCH_NPU_ALLOC_CONF: page_size is not supported"),
            std::string::npos);
  EXPECT_NE(npu_error_of("segment_size_mb:64").find("static_pool_mb"), std::string::npos);
  EXPECT_NE(npu_error_of("base_addr_aligned_kb:16").find("512 bytes"), std::string::npos);
  EXPECT_NE(npu_error_of("large_segment_size_mb:40").find("expandable_segments:True"),
            std::string::npos);
  EXPECT_NE(npu_error_of("multi_stream_lazy_reclaim:True").find("multi_stream_lazy_reclaim"),
            std::string::npos);
  EXPECT_NE(npu_error_of("bogus:1").find("unknown key 'bogus' (modelmem takes expandable_segments"),
            std::string::npos);
  EXPECT_NE(npu_error_of("expandable_segments").find("missing ':VALUE'"), std::string::npos);
}

TEST(TorchNpuConf, EveryNewerTorchNpuKeyHasAnAnswerNamingIt) {
  for (const char* entry :
       {"page_size:1g", "base_addr_aligned_kb:16", "multi_stream_lazy_reclaim:True",
        "release_lock_on_npumalloc:True", "pin_memory_expandable_segments:True",
        "segment_size_mb:64", "large_segment_size_mb:40"}) {
    const std::string key = std::string(entry).substr(0, std::string(entry).find(':'));
    const std::string why = npu_error_of(entry);
    EXPECT_NE(why.find("PYTORCH_NPU_ALLOC_CONF: " + key + " is not supported by modelmem: "),
              std::string::npos)
        << why;
    EXPECT_GT(why.size(),
              ("PYTORCH_NPU_ALLOC_CONF: " + key + " is not supported by modelmem: ").size() + 20)
        << "a reason follows: " << why;
  }
}

TEST(TorchNpuConf, EnvironmentOrder) {
  unsetenv("MODELMEM_ALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True", 1);
  EnvironmentConf c = environment_conf();
  EXPECT_EQ(c.variable, "PYTORCH_NPU_ALLOC_CONF");
  EXPECT_TRUE(c.translated);
  EXPECT_EQ(c.text, "expandable_segments:True");
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
