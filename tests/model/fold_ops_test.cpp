// The constant-folding kernels that read a strided view of a tensor (Slice, Transpose), against
// values worked out by hand on a 2 x 3 x 4 tensor holding 0..23.
#include <gtest/gtest.h>

#include <numeric>

#include "model/fold_value.hpp"

namespace modelmem::model::detail {
namespace {

Value iota_2x3x4() {
  std::vector<std::int64_t> v(24);
  std::iota(v.begin(), v.end(), 0);
  return make_ints({2, 3, 4}, v);
}

TEST(FoldOps, SliceWithStepsReversedAxesAndClampedEnds) {
  // [:, ::-2, 1:100:2] -> dims 2 x 2 x 2: rows 2 and 0, columns 1 and 3.
  auto r = slice(iota_2x3x4(), {-1, 1}, {std::numeric_limits<std::int64_t>::min(), 100}, Dims{1, 2},
                 Dims{-2, 2});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->dims, (Dims{2, 2, 2}));
  EXPECT_EQ(r->ints, (std::vector<std::int64_t>{9, 11, 1, 3, 21, 23, 13, 15}));
  // An empty range along one axis: no elements, the dims say so.
  auto empty = slice(iota_2x3x4(), {2}, {1}, Dims{0}, std::nullopt);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->dims, (Dims{0, 3, 4}));
  EXPECT_TRUE(empty->ints.empty());
  EXPECT_FALSE(slice(iota_2x3x4(), {0}, {1}, Dims{0}, Dims{0}));  // a zero step
}

TEST(FoldOps, TransposeByAPermutationAndByDefault) {
  auto r = transpose(iota_2x3x4(), Dims{2, 0, 1});  // 4 x 2 x 3, r[k][i][j] = x[i][j][k]
  ASSERT_TRUE(r);
  EXPECT_EQ(r->dims, (Dims{4, 2, 3}));
  EXPECT_EQ(r->ints[0], 0);
  EXPECT_EQ(r->ints[1], 4);                          // r[0][0][1] = x[0][1][0]
  EXPECT_EQ(r->ints[3], 12);                         // r[0][1][0] = x[1][0][0]
  EXPECT_EQ(r->ints[6 + 5], 1 + 12 + 8);             // r[1][1][2] = x[1][2][1]
  auto rev = transpose(iota_2x3x4(), std::nullopt);  // 4 x 3 x 2
  ASSERT_TRUE(rev);
  EXPECT_EQ(rev->dims, (Dims{4, 3, 2}));
  EXPECT_EQ(rev->ints[1], 12);  // rev[0][0][1] = x[1][0][0]
  EXPECT_EQ(rev->ints[23], 23);
  EXPECT_FALSE(transpose(iota_2x3x4(), Dims{0, 0, 1}));  // not a permutation
}

}  // namespace
}  // namespace modelmem::model::detail
