"""The XLA-table benchmark reads the text-proto layout of XLA's matmul table, keeps the sm_90
BF16 entries and prices each on the h100 preset (the table itself is not in this repository:
these entries are made up, in its format)."""

from __future__ import annotations

import pytest

from benchmarks import bench_gemm_xla_table as bench

TABLE = """
constexpr char kDefaultMatmulPTable[] = R"pb(
  entries {
    key: "sm_100_B200"
    value {
      entries {
        b: 1
        m: 4096
        n: 4096
        k: 4096
        flops { key: "bf16xbf16->bf16" value: 1 }
      }
    }
  }
  entries {
    key: "sm_90"
    value {
      entries {
        b: 1
        m: 4096
        n: 4096
        k: 4096
        flops { key: "bf16xbf16->bf16" value: 687194767360000 }
        flops { key: "f32xf32->f32" value: 5 }
      }
      entries {
        b: 2
        m: 256
        n: 256
        k: 256
        flops { key: "f32xf32->f32" value: 7 }
      }
    }
  }
  entries {
    key: "gfx942"
    value {
      entries {
        b: 1
        m: 2048
        n: 2048
        k: 2048
        flops { key: "bf16xbf16->bf16" value: 3 }
      }
    }
  }
)pb";
"""


def test_it_reads_the_sm90_bf16_entries_only():
    # the section ends at the next device's key, an AMD GPU's too (the file holds gfx942 and
    # gfx950 after sm_90)
    rows = bench.read_table(TABLE)
    assert rows == [{"b": 1, "m": 4096, "n": 4096, "k": 4096, "flops_per_s": 687194767360000}]


def test_a_product_is_priced_by_its_tiles_and_waves_against_its_kernel_time():
    (r,) = bench.compare(bench.read_table(TABLE))
    # 2 x 4096^3 FLOPs at 687.19 TFLOP/s: 200 us measured. The preset: 512 tiles of 256 x 128
    # on 132 SMs, 4 waves, each 2 x 256 x 128 x 4096 FLOPs at 989 x 0.689 / 132 TFLOP/s per SM
    assert r["measured_ns"] == pytest.approx(200_000)
    assert (r["tiles"], r["waves"], r["predicted_ns"]) == (512, 4, 207_998)
    assert r["ratio"] == pytest.approx(1.03999)
    assert not r["few_tiles"]
    assert bench.summary([r])["100 GFLOP and more"]["median"] == pytest.approx(1.03999)


def test_a_file_without_the_section_says_what_it_found(tmp_path, capsys):
    path = tmp_path / "t.h"
    path.write_text(TABLE.replace('"sm_90"', '"sm_89"'))
    assert bench.main(["--xla-table", str(path)]) == 2
    assert capsys.readouterr().err == (f"bench_gemm_xla_table: {path}: no 'sm_90' section "
                                       "(found: gfx942, sm_100_B200, sm_89)\n")
