// The one pool-name rule (core/strings.hpp).
#include <gtest/gtest.h>

#include <string>

#include "modelmem/core/strings.hpp"

using namespace modelmem::core;

TEST(PoolName, TheRuleAcceptsAndRefuses) {
  EXPECT_TRUE(valid_pool_name("bert"));
  EXPECT_TRUE(valid_pool_name("resnet-50_v1.5"));
  EXPECT_TRUE(valid_pool_name(std::string(kPoolNameMax, 'a')));
  EXPECT_FALSE(valid_pool_name(std::string(kPoolNameMax + 1, 'a')));
  EXPECT_FALSE(valid_pool_name(""));
  for (const char* bad : {"a b", "a,b", "a:b", "a/b", "a]", "\xc3\xa9"})
    EXPECT_FALSE(valid_pool_name(bad)) << bad;
  EXPECT_EQ(pool_name_rule(), "1 to 47 of A-Z a-z 0-9 _ - .");
}

TEST(PoolName, NamesMadeFromTextFollowTheRuleWithRoomForASuffix) {
  EXPECT_EQ(pool_name_from("resnet50"), "resnet50");
  EXPECT_EQ(pool_name_from("my model (v2)"), "my_model__v2_");
  EXPECT_EQ(pool_name_from(""), "model");
  const std::string long_name = pool_name_from(std::string(200, 'x'));
  EXPECT_EQ(long_name.size(), kPoolNameMax - 4);
  EXPECT_TRUE(valid_pool_name(long_name + "_999"));
}
