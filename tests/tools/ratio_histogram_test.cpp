// The one error/bound histogram (tools/run_report.h): every bucket's edges,
// so that a ratio just under the bound never lands in the failure bucket and
// a failed case (1, or NaN) always does; and the labels the HTML shows.
#include <gtest/gtest.h>

#include <cmath>

#include "tools/run_report.h"

namespace kvcheck::cli {
namespace {

TEST(RatioHistogram, EachEdgeOpensItsBucket) {
  const struct {
    double ratio;
    int bucket;
  } cases[] = {{0, 0},    {9e-7, 0},   {1e-6, 1}, {5e-6, 1},  {1e-5, 2}, {0.0099, 4},
               {0.01, 5}, {0.099, 5},  {0.1, 6},  {0.15, 6},  {0.2, 7},  {0.5, 10},
               {0.9, 14}, {0.999, 14}, {1, 15},   {16.8, 15}, {NAN, 15}};
  for (const auto& c : cases) EXPECT_EQ(ratio_bucket(c.ratio), c.bucket) << c.ratio;
}

TEST(RatioHistogram, LabelsAreDecadesThenTenths) {
  EXPECT_EQ(ratio_bucket_label(0), "<1e-6");
  EXPECT_EQ(ratio_bucket_label(1), "1e-6");
  EXPECT_EQ(ratio_bucket_label(5), "0.01");
  EXPECT_EQ(ratio_bucket_label(kRatioFirstTenth), "0.1");
  EXPECT_EQ(ratio_bucket_label(14), "0.9");
  EXPECT_EQ(ratio_bucket_label(kRatioBuckets - 1), ">=1");
}

}  // namespace
}  // namespace kvcheck::cli
