package testenv

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCPU returns the CPU time (user and system) the Redis server behind
// rdb used so far, from INFO cpu. Benchmarks report the difference per job
// beside throughput: on a shared machine, CPU per job is steadier than a
// rate.
func RedisCPU(tb testing.TB, rdb *redis.Client) time.Duration {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\r\n") {
		name, value, ok := strings.Cut(line, ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				tb.Fatal(err)
			}
			total += v
		}
	}
	return time.Duration(total * float64(time.Second))
}
