// ccoll_train: a data-parallel trainer over MPI ranks built on ccoll's public API only, to show
// what each codec does to training. Softmax regression or a one-hidden-layer MLP on MNIST (IDX
// files, gzip or plain; the first --train images train, the last --test evaluate) or, without
// --data, generated data (said on stdout). Every rank holds the same weights; each global batch
// is split across the ranks; the gradients (or, with --comm momentum, the ranks' momentum
// buffers) are averaged with ccoll::compressed_allreduce and the codec under test.
//
// Optimizers: sgd (momentum), adam, and qadam — quantized Adam with error feedback
// (docs/design/6-research-codecs.md) as a reference optimizer on the public API: gradients
// through compressed_allreduce with the gradient codec (use ef=1), weights sharded across ranks
// (each rank runs Adam on its shard in fp32) and re-assembled every step with compressed_allgather
// and --weight-codec (use ef=1); the model computes with the gathered, quantized weights.
//
// Per epoch it prints train loss, test accuracy and the bits per element sent; at the end it
// appends one JSON object to --out (curves, accuracy, wire bytes, reconstruction error of the
// averaged quantity against an exact MPI average, codec bits chosen).
#include <mpi.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"

namespace {

int rank_ = 0;
int size_ = 1;

[[noreturn]] void fail(const std::string& msg) {
  if (rank_ == 0) std::fprintf(stderr, "ccoll_train: %s\n", msg.c_str());
  MPI_Finalize();
  std::exit(2);
}

struct Args {
  std::string data;
  std::string model = "mlp";
  int hidden = 128;
  std::string optimizer = "sgd";
  double lr = -1;  // default per optimizer
  double momentum = 0.9;
  int epochs = 8;
  int batch = 64;  // global
  std::string codec = "none";
  std::string weight_codec = "none";
  std::string comm = "grad";
  std::size_t train = 8000;
  std::size_t test = 2000;
  long max_steps = -1;
  unsigned seed = 1;
  bool measure_error = true;
  std::string out;
  std::string label;
};

void usage() {
  if (rank_ != 0) return;
  std::printf(
      "Usage: ccoll_train [options]\n"
      "  --data DIR            MNIST IDX files (t10k-images-idx3-ubyte[.gz], t10k-labels-...);\n"
      "                        without it: generated data\n"
      "  --model mlp|softmax   (default mlp)        --hidden N   MLP width (default 128)\n"
      "  --optimizer sgd|adam|qadam (default sgd)   --lr X       (default 0.1 sgd, 1e-3 adam)\n"
      "  --momentum X          sgd momentum (default 0.9)\n"
      "  --epochs N (default 8)   --batch N  global batch (default 64)   --steps N  stop early\n"
      "  --codec SPEC          codec of the averaged gradient/momentum (default none)\n"
      "  --comm grad|momentum  average gradients (default) or each rank's momentum buffer (sgd)\n"
      "  --weight-codec SPEC   qadam: codec of the weight all-gather (default none)\n"
      "  --train N --test N    images used (default 8000 and 2000: first N train, last N test)\n"
      "  --seed N              data order and initialization (default 1)\n"
      "  --no-error            skip the exact reference average (reconstruction error)\n"
      "  --out FILE            append a JSON summary      --label TEXT  name in the summary\n");
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) fail(k + " needs a value");
      return argv[++i];
    };
    auto num = [&](double lo, double hi) {
      const std::string v = val();
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(x >= lo && x <= hi)) {
        fail(k + ": '" + v + "' (valid: a number in [" + std::to_string(lo) + ", " +
             std::to_string(hi) + "])");
      }
      return x;
    };
    if (k == "--data")
      a.data = val();
    else if (k == "--model")
      a.model = val();
    else if (k == "--hidden")
      a.hidden = static_cast<int>(num(1, 4096));
    else if (k == "--optimizer")
      a.optimizer = val();
    else if (k == "--lr")
      a.lr = num(1e-9, 10);
    else if (k == "--momentum")
      a.momentum = num(0, 0.999);
    else if (k == "--epochs")
      a.epochs = static_cast<int>(num(1, 1000));
    else if (k == "--batch")
      a.batch = static_cast<int>(num(1, 1 << 20));
    else if (k == "--steps")
      a.max_steps = static_cast<long>(num(1, 1e9));
    else if (k == "--codec")
      a.codec = val();
    else if (k == "--weight-codec")
      a.weight_codec = val();
    else if (k == "--comm")
      a.comm = val();
    else if (k == "--train")
      a.train = static_cast<std::size_t>(num(1, 1e7));
    else if (k == "--test")
      a.test = static_cast<std::size_t>(num(1, 1e7));
    else if (k == "--seed")
      a.seed = static_cast<unsigned>(num(0, 1e9));
    else if (k == "--no-error")
      a.measure_error = false;
    else if (k == "--out")
      a.out = val();
    else if (k == "--label")
      a.label = val();
    else if (k == "-h" || k == "--help") {
      usage();
      MPI_Finalize();
      std::exit(0);
    } else {
      usage();
      fail("unknown option '" + k + "'");
    }
  }
  if (a.model != "mlp" && a.model != "softmax")
    fail("--model: '" + a.model + "' (valid: mlp, softmax)");
  if (a.optimizer != "sgd" && a.optimizer != "adam" && a.optimizer != "qadam") {
    fail("--optimizer: '" + a.optimizer + "' (valid: sgd, adam, qadam)");
  }
  if (a.comm != "grad" && a.comm != "momentum")
    fail("--comm: '" + a.comm + "' (valid: grad, momentum)");
  if (a.comm == "momentum" && a.optimizer != "sgd") fail("--comm momentum needs --optimizer sgd");
  if (a.batch % size_ != 0) {
    fail("--batch " + std::to_string(a.batch) + " is not a multiple of the " +
         std::to_string(size_) + " ranks");
  }
  if (a.lr < 0) a.lr = a.optimizer == "sgd" ? 0.1 : 1e-3;
  for (const std::string* spec : {&a.codec, &a.weight_codec}) {
    try {
      ccoll::describe_codec(*spec, size_);
    } catch (const ccoll::Error& e) {
      fail(std::string(spec == &a.codec ? "--codec: " : "--weight-codec: ") + e.what());
    }
  }
  if (a.label.empty()) a.label = a.codec;
  return a;
}

// ---- data -----------------------------------------------------------------------------------

struct Dataset {
  std::size_t dim = 784;
  std::vector<float> x;         // n × dim
  std::vector<std::uint8_t> y;  // n
  std::size_t n() const { return y.size(); }
};

// Reads a whole IDX file, gzip-compressed or not (zlib reads both).
bool read_file(const std::string& path, std::vector<unsigned char>& out) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  unsigned char buf[1 << 16];
  int got;
  while ((got = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + got);
  gzclose(f);
  return got == 0;
}

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         p[3];
}

bool load_mnist(const std::string& dir, Dataset& d, std::string& why) {
  std::vector<unsigned char> img;
  std::vector<unsigned char> lab;
  const std::string base = dir + "/t10k-";
  if (!read_file(base + "images-idx3-ubyte.gz", img) &&
      !read_file(base + "images-idx3-ubyte", img)) {
    why = "cannot read " + base + "images-idx3-ubyte[.gz]";
    return false;
  }
  if (!read_file(base + "labels-idx1-ubyte.gz", lab) &&
      !read_file(base + "labels-idx1-ubyte", lab)) {
    why = "cannot read " + base + "labels-idx1-ubyte[.gz]";
    return false;
  }
  if (img.size() < 16 || be32(img.data()) != 0x803 || lab.size() < 8 || be32(lab.data()) != 0x801) {
    why = "not IDX image/label files (bad magic)";
    return false;
  }
  const std::size_t n = be32(img.data() + 4);
  const std::size_t rows = be32(img.data() + 8);
  const std::size_t cols = be32(img.data() + 12);
  if (n != be32(lab.data() + 4) || img.size() != 16 + n * rows * cols || lab.size() != 8 + n) {
    why = "IDX sizes do not match their headers";
    return false;
  }
  d.dim = rows * cols;
  d.x.resize(n * d.dim);
  for (std::size_t i = 0; i < n * d.dim; ++i) d.x[i] = img[16 + i] / 255.0f;
  d.y.assign(lab.begin() + 8, lab.end());
  for (const auto v : d.y) {
    if (v > 9) {
      why = "label out of range";
      return false;
    }
  }
  return true;
}

// Generated data: 10 classes, each a sparse random prototype in [0,1]^784 under heavy noise, so
// the task has the shape of MNIST, is learnable, and is not solved in a few steps (a loss that
// stays well above 0 is what lets a short run tell a working codec from a broken one).
void generate(Dataset& d, std::size_t n, unsigned seed) {
  std::mt19937 gen(seed + 1000);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.8f);
  std::vector<float> proto(10 * d.dim);
  for (auto& v : proto) v = u(gen) < 0.1f ? u(gen) : 0.0f;
  d.x.resize(n * d.dim);
  d.y.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<std::uint8_t>(gen() % 10);
    d.y[i] = c;
    for (std::size_t k = 0; k < d.dim; ++k) {
      d.x[i * d.dim + k] = std::clamp(proto[c * d.dim + k] + noise(gen), 0.0f, 1.0f);
    }
  }
}

// ---- model ----------------------------------------------------------------------------------

struct Model {
  std::size_t in = 784;
  std::size_t hidden = 0;  // 0: softmax regression
  std::size_t size() const {
    return hidden == 0 ? 10 * in + 10 : hidden * in + hidden + 10 * hidden + 10;
  }

  void init(std::vector<float>& w, unsigned seed) const {
    std::mt19937 gen(seed);
    w.assign(size(), 0.0f);
    if (hidden == 0) return;  // softmax regression starts at zero
    std::normal_distribution<float> n1(0.0f, std::sqrt(2.0f / static_cast<float>(in)));
    std::normal_distribution<float> n2(0.0f, std::sqrt(2.0f / static_cast<float>(hidden)));
    for (std::size_t i = 0; i < hidden * in; ++i) w[i] = n1(gen);
    float* w2 = w.data() + hidden * in + hidden;
    for (std::size_t i = 0; i < 10 * hidden; ++i) w2[i] = n2(gen);
  }

  // Loss and (with g) the gradient of the mean loss over samples idx[0..n) added into g;
  // returns the summed loss and counts correct predictions.
  double run(const std::vector<float>& w, const Dataset& d, const std::size_t* idx, std::size_t n,
             float* g, std::size_t& correct) const {
    std::vector<float> h(hidden);
    std::vector<float> dh(hidden);
    float z[10];
    double loss = 0;
    const float scale = g != nullptr ? 1.0f / static_cast<float>(n) : 0.0f;
    for (std::size_t s = 0; s < n; ++s) {
      const float* x = d.x.data() + idx[s] * in;
      const int y = d.y[idx[s]];
      const float* wo;  // output layer weights (10 × k)
      const float* bo;
      const float* feat;  // its input features
      std::size_t k;
      if (hidden == 0) {
        wo = w.data();
        bo = w.data() + 10 * in;
        feat = x;
        k = in;
      } else {
        const float* w1 = w.data();
        const float* b1 = w1 + hidden * in;
        for (std::size_t j = 0; j < hidden; ++j) {
          float a = b1[j];
          const float* row = w1 + j * in;
          for (std::size_t i = 0; i < in; ++i) a += row[i] * x[i];
          h[j] = a > 0 ? a : 0;
        }
        wo = b1 + hidden;
        bo = wo + 10 * hidden;
        feat = h.data();
        k = hidden;
      }
      float zmax = -1e30f;
      for (int c = 0; c < 10; ++c) {
        float a = bo[c];
        const float* row = wo + c * k;
        for (std::size_t i = 0; i < k; ++i) a += row[i] * feat[i];
        z[c] = a;
        zmax = std::max(zmax, a);
      }
      double sum = 0;
      for (float& v : z) sum += std::exp(static_cast<double>(v - zmax));
      loss += std::log(sum) - static_cast<double>(z[y] - zmax);
      int best = 0;
      for (int c = 1; c < 10; ++c) best = z[c] > z[best] ? c : best;
      correct += best == y;
      if (g == nullptr) continue;
      // dz = softmax - onehot, scaled for the mean
      float dz[10];
      for (int c = 0; c < 10; ++c) {
        dz[c] = (static_cast<float>(std::exp(static_cast<double>(z[c] - zmax)) / sum) -
                 (c == y ? 1.0f : 0.0f)) *
                scale;
      }
      float* gwo = g + (wo - w.data());
      float* gbo = g + (bo - w.data());
      if (hidden != 0) std::fill(dh.begin(), dh.end(), 0.0f);
      for (int c = 0; c < 10; ++c) {
        gbo[c] += dz[c];
        float* grow = gwo + c * k;
        const float* row = wo + c * k;
        for (std::size_t i = 0; i < k; ++i) grow[i] += dz[c] * feat[i];
        if (hidden != 0) {
          for (std::size_t i = 0; i < k; ++i) dh[i] += dz[c] * row[i];
        }
      }
      if (hidden == 0) continue;
      float* gw1 = g;
      float* gb1 = g + hidden * in;
      for (std::size_t j = 0; j < hidden; ++j) {
        if (h[j] <= 0) continue;
        gb1[j] += dh[j];
        float* grow = gw1 + j * in;
        for (std::size_t i = 0; i < in; ++i) grow[i] += dh[j] * x[i];
      }
    }
    return loss;
  }
};

struct Adam {
  explicit Adam(double rate) : lr(rate) {}
  double lr, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<float> m, v;
  long t = 0;
  void step(float* w, const float* g, std::size_t n) {
    if (m.size() != n) {
      m.assign(n, 0.0f);
      v.assign(n, 0.0f);
    }
    ++t;
    const double c1 = 1 - std::pow(b1, static_cast<double>(t));
    const double c2 = 1 - std::pow(b2, static_cast<double>(t));
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = static_cast<float>(b1 * m[i] + (1 - b1) * g[i]);
      v[i] = static_cast<float>(b2 * v[i] + (1 - b2) * g[i] * g[i]);
      w[i] -= static_cast<float>(lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps));
    }
  }
};

std::string json_array(const std::vector<double>& v) {
  std::string s = "[";
  char buf[32];
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.6g", i ? "," : "", v[i]);
    s += buf;
  }
  return s + "]";
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (const char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  const Args args = parse(argc, argv);

  Dataset data;
  std::string source;
  if (!args.data.empty()) {
    std::string why;
    if (!load_mnist(args.data, data, why)) fail("--data " + args.data + ": " + why);
    if (args.train + args.test > data.n()) {
      fail("--train " + std::to_string(args.train) + " + --test " + std::to_string(args.test) +
           " exceeds the " + std::to_string(data.n()) + " images in " + args.data);
    }
    source = "MNIST t10k from " + args.data;
  } else {
    generate(data, args.train + args.test, 7);
    source = "generated data (no --data given: 10 noisy prototypes in 784 dimensions)";
  }
  const std::size_t test_begin = data.n() - args.test;
  Model model;
  model.in = data.dim;
  model.hidden = args.model == "mlp" ? static_cast<std::size_t>(args.hidden) : 0;
  const std::size_t np = model.size();
  std::vector<float> w;
  model.init(w, args.seed);  // every rank: the same seed, the same weights

  // qadam: shards of the (padded) parameter vector, master copy of this rank's shard in fp32
  const std::size_t shard =
      (np + static_cast<std::size_t>(size_) - 1) / static_cast<std::size_t>(size_);
  std::vector<float> master;
  std::vector<float> gathered;
  if (args.optimizer == "qadam") {
    master.assign(w.begin() + std::min(np, shard * rank_),
                  w.begin() + std::min(np, shard * (rank_ + 1)));
    master.resize(shard, 0.0f);
    gathered.assign(shard * static_cast<std::size_t>(size_), 0.0f);
  }

  if (rank_ == 0) {
    std::printf(
        "# ccoll_train: %s; %s %s (%zu parameters), %s lr %g, batch %d over %d ranks, "
        "codec %s (%s)%s%s\n",
        source.c_str(), args.model.c_str(),
        args.model == "mlp" ? ("hidden " + std::to_string(args.hidden)).c_str() : "", np,
        args.optimizer.c_str(), args.lr, args.batch, size_, args.codec.c_str(),
        args.comm == "momentum" ? "momentum buffers" : "gradients",
        args.optimizer == "qadam" ? ", weights " : "",
        args.optimizer == "qadam" ? args.weight_codec.c_str() : "");
    std::fflush(stdout);
  }

  std::vector<std::size_t> order(args.train);
  std::vector<float> g(np);
  std::vector<float> avg(np);
  std::vector<float> mom(np, 0.0f);  // sgd: momentum (the averaged one, or this rank's own)
  std::vector<float> exact(np);
  Adam adam(args.lr);
  const int local = args.batch / size_;
  const long steps_per_epoch = static_cast<long>(args.train) / args.batch;
  if (steps_per_epoch < 1) fail("--batch is larger than --train");
  std::vector<double> losses;
  std::vector<double> accuracies;
  std::vector<double> test_losses;
  double wire_grad = 0;     // bytes this rank sent for the averaged quantity (payloads + control)
  double wire_weights = 0;  // qadam: bytes this rank sent for the weights
  double err_num = 0;       // sum over steps of ||avg - exact||^2
  double err_den = 0;       // sum over steps of ||exact||^2
  double bits_sum = 0;
  std::vector<double> epoch_bits;  // mean Stats::bits of each epoch (dq's width log)
  double epoch_bits_sum = 0;
  long steps = 0;
  bool stop = false;
  const double t_start = MPI_Wtime();

  for (int epoch = 0; epoch < args.epochs && !stop; ++epoch) {
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::mt19937 shuffle(args.seed * 7919u + static_cast<unsigned>(epoch));
    std::shuffle(order.begin(), order.end(), shuffle);  // the same order on every rank
    double epoch_loss = 0;
    long epoch_steps = 0;
    for (long s = 0; s < steps_per_epoch; ++s) {
      if (args.max_steps > 0 && steps >= args.max_steps) {
        stop = true;
        break;
      }
      const std::size_t* idx = order.data() + s * args.batch + rank_ * local;
      std::fill(g.begin(), g.end(), 0.0f);
      std::size_t correct = 0;
      const double loss =
          model.run(w, data, idx, static_cast<std::size_t>(local), g.data(), correct);
      double loss_all = 0;
      const double mine = loss / local;
      MPI_Allreduce(&mine, &loss_all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      epoch_loss += loss_all / size_;
      // what is averaged: the gradient, or (--comm momentum) this rank's momentum buffer
      const float mu = static_cast<float>(args.momentum);
      float* send = g.data();
      if (args.comm == "momentum") {
        for (std::size_t i = 0; i < np; ++i) mom[i] = mu * mom[i] + g[i];
        send = mom.data();
      }
      ccoll::Options opt;
      opt.codec = args.codec;
      opt.key = 1;
      opt.average = true;
      opt.seed = args.seed;
      opt.lr = args.optimizer == "sgd" ? args.lr : 0.0;
      ccoll::Stats st;
      opt.stats = &st;
      ccoll::compressed_allreduce(send, avg.data(), np, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
      wire_grad += static_cast<double>(st.wire_bytes_sent + st.control_bytes);
      bits_sum += st.bits;
      epoch_bits_sum += st.bits;
      if (args.measure_error) {
        MPI_Allreduce(send, exact.data(), static_cast<int>(np), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (std::size_t i = 0; i < np; ++i) {
          const double e = static_cast<double>(exact[i]) / size_;
          err_num += (avg[i] - e) * (avg[i] - e);
          err_den += e * e;
        }
      }
      // the update, identical on every rank (the averages are bit-identical)
      if (args.optimizer == "sgd") {
        const float lr = static_cast<float>(args.lr);
        if (args.comm == "momentum") {
          for (std::size_t i = 0; i < np; ++i) w[i] -= lr * avg[i];
        } else {
          for (std::size_t i = 0; i < np; ++i) {
            mom[i] = mu * mom[i] + avg[i];
            w[i] -= lr * mom[i];
          }
        }
      } else if (args.optimizer == "adam") {
        adam.step(w.data(), avg.data(), np);
      } else {
        // qadam: Adam on this rank's shard, then the shards re-assembled through the codec
        const std::size_t begin = shard * static_cast<std::size_t>(rank_);
        const std::size_t n = begin < np ? std::min(shard, np - begin) : 0;
        if (n > 0) adam.step(master.data(), avg.data() + begin, n);
        ccoll::Options wopt;
        wopt.codec = args.weight_codec;
        wopt.key = 2;
        wopt.seed = args.seed + 1;
        ccoll::Stats ws;
        wopt.stats = &ws;
        ccoll::compressed_allgather(master.data(), shard, gathered.data(), MPI_FLOAT,
                                    MPI_COMM_WORLD, wopt);
        wire_weights += static_cast<double>(ws.wire_bytes_sent + ws.control_bytes);
        std::copy(gathered.begin(), gathered.begin() + static_cast<std::ptrdiff_t>(np), w.begin());
      }
      ++steps;
      ++epoch_steps;
    }
    // test accuracy: each rank a slice of the test set
    const std::size_t per = (args.test + size_ - 1) / size_;
    const std::size_t b = std::min(args.test, per * rank_);
    const std::size_t e = std::min(args.test, b + per);
    std::vector<std::size_t> tidx(e - b);
    std::iota(tidx.begin(), tidx.end(), test_begin + b);
    std::size_t correct = 0;
    double tl[2] = {model.run(w, data, tidx.data(), tidx.size(), nullptr, correct),
                    static_cast<double>(correct)};
    MPI_Allreduce(MPI_IN_PLACE, tl, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double acc = 100.0 * tl[1] / static_cast<double>(args.test);
    test_losses.push_back(tl[0] / static_cast<double>(args.test));
    const double l = epoch_steps > 0 ? epoch_loss / epoch_steps : 0.0;
    losses.push_back(l);
    accuracies.push_back(acc);
    epoch_bits.push_back(epoch_steps > 0 ? epoch_bits_sum / static_cast<double>(epoch_steps) : 0.0);
    epoch_bits_sum = 0;
    if (rank_ == 0) {
      std::printf("epoch %2d  steps %6ld  train loss %.4f  test loss %.4f  test accuracy %.2f%%\n",
                  epoch + 1, steps, l, test_losses.back(), acc);
      std::fflush(stdout);
    }
  }

  // totals over ranks
  double sums[3] = {wire_grad, wire_weights, 0};
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  // bits per element: 8·bytes / (elements that an all-reduce ring moves: 2(p-1) × count per
  // step, summed over ranks), i.e. 32 for uncompressed fp32 plus headers
  const double moved = size_ > 1 ? 2.0 * (size_ - 1) * static_cast<double>(np) * steps : 1.0;
  const double grad_bits = size_ > 1 ? 8 * sums[0] / moved : 0;
  const double wmoved =
      size_ > 1 ? (size_ - 1.0) * static_cast<double>(shard) * size_ * steps : 1.0;
  const double weight_bits = size_ > 1 && args.optimizer == "qadam" ? 8 * sums[1] / wmoved : 0;
  const double rel_err = err_den > 0 ? std::sqrt(err_num / err_den) : 0;
  const double mean_bits = steps > 0 ? bits_sum / steps : 0;
  if (rank_ == 0) {
    std::printf(
        "final: test accuracy %.2f%%, %.2f bits/element on the wire (gradients%s), "
        "%.3g MB sent in all, relative error of the average %.3g, %.1f s\n",
        accuracies.empty() ? 0.0 : accuracies.back(), grad_bits,
        args.optimizer == "qadam" ? (", weights " + std::to_string(weight_bits)).c_str() : "",
        (sums[0] + sums[1]) / 1e6, rel_err, MPI_Wtime() - t_start);
    if (!args.out.empty()) {
      FILE* f = std::fopen(args.out.c_str(), "a");
      if (f == nullptr) fail("--out: cannot open " + args.out);
      std::fprintf(
          f,
          "{\"label\": \"%s\", \"codec\": \"%s\", \"weight_codec\": \"%s\", "
          "\"optimizer\": \"%s\", \"comm\": \"%s\", \"model\": \"%s\", \"ranks\": %d, "
          "\"data\": \"%s\", \"seed\": %u, \"steps\": %ld, \"params\": %zu, "
          "\"final_accuracy\": %.4f, "
          "\"final_loss\": %.6g, \"final_test_loss\": %.6g, "
          "\"grad_bits_per_element\": %.4f, "
          "\"weight_bits_per_element\": %.4f, \"wire_bytes\": %.0f, "
          "\"relative_error\": %.6g, \"mean_codec_bits\": %.3f, \"loss\": %s, "
          "\"accuracy\": %s, \"bits_per_epoch\": %s}\n",
          json_escape(args.label).c_str(), json_escape(args.codec).c_str(),
          json_escape(args.weight_codec).c_str(), args.optimizer.c_str(), args.comm.c_str(),
          args.model.c_str(), size_, args.data.empty() ? "generated" : "mnist", args.seed, steps,
          np, accuracies.empty() ? 0.0 : accuracies.back(), losses.empty() ? 0.0 : losses.back(),
          test_losses.empty() ? 0.0 : test_losses.back(), grad_bits, weight_bits, sums[0] + sums[1],
          rel_err, mean_bits, json_array(losses).c_str(), json_array(accuracies).c_str(),
          json_array(epoch_bits).c_str());
      std::fclose(f);
    }
  }
  MPI_Finalize();
  return 0;
}
