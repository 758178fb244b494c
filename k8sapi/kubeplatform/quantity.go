package kubeplatform

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// quantity is a Kubernetes resource quantity ("500m", "128Mi", "1.5",
// "2e3"), held exactly.
type quantity struct{ r *big.Rat }

// The suffixes of a quantity and the factor each stands for.
var (
	binarySuffixes  = map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
	decimalSuffixes = map[string]int{"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
)

// parseQuantity reads a quantity in the API's syntax: an optionally signed
// decimal number, then a binary suffix (Ki … Ei), a decimal one (n, u, m,
// k, M, G, T, P, E) or a decimal exponent (e3, E-2).
func parseQuantity(s string) (quantity, error) {
	bad := func() (quantity, error) { return quantity{}, fmt.Errorf("%q is not a resource quantity", s) }
	num := s
	if num != "" && (num[0] == '+' || num[0] == '-') {
		num = num[1:]
	}
	end := 0
	digits := 0
	for end < len(num) && (num[end] >= '0' && num[end] <= '9' || num[end] == '.') {
		if num[end] != '.' {
			digits++
		}
		end++
	}
	if digits == 0 || strings.Count(num[:end], ".") > 1 {
		return bad()
	}
	r, ok := new(big.Rat).SetString(s[:len(s)-len(num)+end])
	if !ok {
		return bad()
	}
	suffix := num[end:]
	if f, ok := binarySuffixes[suffix]; ok {
		return quantity{r.Mul(r, new(big.Rat).SetInt64(f))}, nil
	}
	exp, ok := decimalSuffixes[suffix]
	if !ok {
		if len(suffix) < 2 || suffix[0] != 'e' && suffix[0] != 'E' {
			return bad()
		}
		e, err := strconv.Atoi(suffix[1:])
		if err != nil || e > 1000 || e < -1000 {
			return bad()
		}
		exp = e
	}
	pow := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil)
	if exp >= 0 {
		r.Mul(r, new(big.Rat).SetInt(pow))
	} else {
		r.Quo(r, new(big.Rat).SetInt(pow))
	}
	return quantity{r}, nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// scaled is the quantity in units of 10^scale, rounded up to an integer
// and held to the int64 range: the API's Quantity.ScaledValue, so
// scaled(0) is Value() and scaled(-3) is MilliValue().
func (q quantity) scaled(scale int) int64 {
	if q.r == nil {
		return 0
	}
	r := new(big.Rat).Set(q.r)
	pow := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(scale))), nil))
	if scale < 0 {
		r.Mul(r, pow)
	} else {
		r.Quo(r, pow)
	}
	n, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		n.Add(n, big.NewInt(1))
	}
	switch {
	case n.IsInt64():
		return n.Int64()
	case n.Sign() > 0:
		return math.MaxInt64
	default:
		return math.MinInt64
	}
}

// inUnits is what the kubelet gives a resourceFieldRef: the quantity
// divided by the divisor, rounded up, computed in float64 from the
// rounded-up milli-units (CPU) or units (everything else), as the
// kubelet computes it.
func inUnits(q, divisor quantity, cpu bool) string {
	scale := 0
	if cpu {
		scale = -3
	}
	return fmt.Sprint(int64(math.Ceil(float64(q.scaled(scale)) / float64(divisor.scaled(scale)))))
}
