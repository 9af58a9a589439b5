// The extension `hoist._hoist` (pybind11), re-exported by the package `hoist` (python/hoist/).
// It binds the public API only (include/hoist/, libhoist.so), one Python name per call:
// hoist.load (hoist::Load), hoist.load_async (hoist::LoadAsync) and hoist.attach (hoist::Attach)
// each return a Model; Model.tensors() is its dict of tensors through DLPack, with no copy: torch
// tensors on the GPU (torch.from_dlpack), numpy arrays on the host backend (BF16 and FP8 tensors,
// which numpy lacks, as uint16 / uint8 views of the same bytes); Model[name] is one tensor with
// __dlpack__.
//
// Keywords: model, topology, rank, comm plus every job option (hoist::JobOptions(), the names of
// hoist/job_options.h: tp=2, read="direct", pinning="mallochost", slot_mib=32, dedup="node",
// verify=True, ...); None or absent leaves it to the topology file, else the default. An unknown
// keyword is a TypeError naming the nearest option.
//
// Communicator: load(comm=None) loads over MPI_COMM_WORLD when the process has initialised MPI
// (e.g. mpi4py), else alone as `rank`; comm="world" initialises MPI first when needed (hoist then
// finalises it at exit: mpi_finalize, registered by the package); comm=<mpi4py communicator>
// loads over that communicator. Every rank of the communicator must call load.
// Tensor.numpy() and Tensor.raw() give numpy the BF16 / FP8 bits (np.from_dlpack(t) on a BF16
// tensor fails: numpy has no bfloat16).
//
// Ownership: every array or tensor handed out holds the weights alive (a DLPack export);
// Model.release() drops the model's own reference. Failure: a hoist Status becomes RuntimeError
// with its message. Threading: the GIL is released while loading or attaching.
#include <mpi.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "hoist/hoist.h"
#include "hoist/hoist_dlpack.h"

namespace py = pybind11;

namespace {

bool g_hoist_initialised_mpi = false;

bool MpiActive() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

// Initialises MPI (MPI_THREAD_FUNNELED) unless the process already has; true when this call did.
bool MpiInit() {
  if (MpiActive()) return false;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised) throw std::runtime_error("MPI was finalised in this process; it cannot restart");
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    throw std::runtime_error("MPI_Init_thread failed");
  }
  g_hoist_initialised_mpi = true;
  return true;
}

// Finalises MPI if hoist initialised it (the package registers this with atexit).
void MpiFinalize() {
  if (g_hoist_initialised_mpi && MpiActive()) MPI_Finalize();
  g_hoist_initialised_mpi = false;
}

// `comm` as an MPI_Comm: None -> nullopt (hoist's default), "world" -> MPI_COMM_WORLD (MPI
// initialised when needed), an mpi4py communicator -> its handle (through its Fortran handle).
std::optional<MPI_Comm> ToMpiComm(const py::object& comm) {
  if (comm.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(comm)) {
    if (comm.cast<std::string>() != "world") {
      throw std::invalid_argument("comm must be None, 'world' or an mpi4py communicator, not '" +
                                  comm.cast<std::string>() + "'");
    }
    MpiInit();
    return MPI_COMM_WORLD;
  }
  if (py::hasattr(comm, "py2f")) {
    if (!MpiActive()) throw std::runtime_error("an mpi4py communicator was given but MPI is off");
    return MPI_Comm_f2c(comm.attr("py2f")().cast<MPI_Fint>());
  }
  throw std::invalid_argument("comm must be None, 'world' or an mpi4py communicator");
}

using ModelPtr = std::shared_ptr<hoist::Model>;

[[noreturn]] void Throw(const hoist::Status& s) { throw std::runtime_error(s.ToString()); }

void CapsuleDestructor(PyObject* capsule) {
  // A consumer renames the capsule "used_dltensor" once it owns the tensor.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  }
}

// One tensor of a model, exporting itself through DLPack (raw: unsigned-integer dtypes).
struct PyTensor {
  ModelPtr model;
  std::size_t index = 0;
  bool raw = false;

  const hoist::Tensor& t() const {
    if (!model->valid()) throw std::runtime_error("the model was released");
    return model->tensors().at(index);
  }
  py::capsule Dlpack(py::object /*stream*/) const {
    hoist::Result<DLManagedTensor*> m = hoist::ToDLPack(*model, index, raw);
    if (!m.ok()) Throw(m.status());
    return py::capsule(*m, "dltensor", &CapsuleDestructor);
  }
  py::tuple Device() const {
    const bool cuda = model->device_type() == hoist::DeviceType::kCuda;
    return py::make_tuple(static_cast<int>(cuda ? kDLCUDA : kDLCPU),
                          cuda ? model->device_ordinal() : 0);
  }
};

// numpy has no bfloat16 or 8-bit floats: those go to numpy as raw unsigned integers.
bool NumpyHasDtype(const std::string& dtype) {
  return dtype != "BF16" && dtype != "F8_E4M3" && dtype != "F8_E5M2";
}

py::dict Convert(const ModelPtr& model, const std::string& to) {
  std::string mode = to;
  if (mode == "auto") mode = model->device_type() == hoist::DeviceType::kCuda ? "torch" : "numpy";
  py::object from_dlpack;
  if (mode == "torch") {
    from_dlpack = py::module_::import("torch").attr("from_dlpack");
  } else if (mode == "numpy") {
    from_dlpack = py::module_::import("numpy").attr("from_dlpack");
  } else if (mode != "dlpack") {
    throw std::invalid_argument("to must be auto, torch, numpy or dlpack, not '" + to + "'");
  }
  py::dict out;
  for (std::size_t i = 0; i < model->tensors().size(); ++i) {
    const hoist::Tensor& t = model->tensors()[i];
    PyTensor pt{model, i, mode == "numpy" && !NumpyHasDtype(t.dtype)};
    if (mode == "dlpack") {
      out[py::str(t.name)] = py::cast(pt);
    } else {
      out[py::str(t.name)] = from_dlpack(py::cast(pt));
    }
  }
  return out;
}

// A Python keyword's value as the job option `info`'s type: str, int (not bool), a number (int
// or float), bool. TypeError naming the keyword otherwise.
hoist::JobOptionValue KeywordValue(const hoist::JobOptionInfo& info, const py::handle& value) {
  auto wrong = [&](const char* want) {
    return py::type_error("hoist: keyword " + std::string(info.name) + " takes " + want + ", not " +
                          std::string(py::str(value.get_type().attr("__name__"))));
  };
  const bool is_bool = py::isinstance<py::bool_>(value);
  const bool is_int = py::isinstance<py::int_>(value) && !is_bool;
  switch (info.type) {
    case hoist::JobOptionType::kString:
      if (!py::isinstance<py::str>(value)) throw wrong("a str");
      return value.cast<std::string>();
    case hoist::JobOptionType::kInt:
      if (!is_int) throw wrong("an int");
      return value.cast<std::int64_t>();
    case hoist::JobOptionType::kDouble:
      if (!is_int && !py::isinstance<py::float_>(value)) throw wrong("a number");
      return value.cast<double>();
    case hoist::JobOptionType::kBool:
      if (!is_bool) throw wrong("a bool");
      return value.cast<bool>();
  }
  throw wrong("a value");
}

// The job options among the keywords (None leaves one unset); TypeError naming an unknown one and
// the nearest option.
hoist::LoadOptions Options(const std::string& model, const std::string& topology, int rank,
                           const py::kwargs& options) {
  hoist::LoadOptions o;
  if (!model.empty()) o.model = model;
  o.topology_file = topology;
  o.rank = rank;
  for (const auto& [key, value] : options) {
    const std::string k = py::str(key);
    const hoist::JobOptionInfo* info = hoist::FindJobOption(k);
    if (info == nullptr) {
      const std::string near = hoist::NearestJobOption(k);
      throw py::type_error("hoist: unknown keyword '" + k + "'" +
                           (near.empty() ? "" : " (did you mean '" + near + "'?)"));
    }
    if (value.is_none()) continue;
    const hoist::Status s = hoist::SetJobOption(&o, k, KeywordValue(*info, value));
    if (!s.ok()) Throw(s);
  }
  return o;
}

ModelPtr LoadModelAs(bool async, const std::string& model, const std::string& topology, int rank,
                     const py::object& comm, const py::kwargs& options) {
  hoist::LoadOptions o = Options(model, topology, rank, options);
  const std::optional<MPI_Comm> mpi_comm = ToMpiComm(comm);
  if (mpi_comm) o.mpi_comm = &*mpi_comm;
  hoist::Result<hoist::Model> m = [&] {
    py::gil_scoped_release nogil;
    return async ? hoist::LoadAsync(o) : hoist::Load(o);
  }();
  if (!m.ok()) Throw(m.status());
  return std::make_shared<hoist::Model>(std::move(m).value());
}

// The options as the docstring lists them, from the table.
std::string OptionsDoc() {
  std::string doc =
      "\n\nJob options (keywords; None or absent: the topology file's, else the default):";
  for (const hoist::JobOptionInfo& o : hoist::JobOptions()) {
    doc += "\n  " + std::string(o.name) + ": " + std::string(o.help);
    if (!o.choices.empty()) doc += " (" + std::string(o.choices) + ")";
    if (!o.default_is.empty()) doc += "; default " + std::string(o.default_is);
  }
  return doc;
}

ModelPtr AttachModel(const std::string& path, int timeout_ms, bool pending_ok) {
  hoist::AttachOptions o;
  o.timeout_ms = timeout_ms;
  o.pending_ok = pending_ok;
  o.client = "python";
  hoist::Result<hoist::Model> m = [&] {
    py::gil_scoped_release nogil;
    return hoist::Attach(path, o);
  }();
  if (!m.ok()) Throw(m.status());
  return std::make_shared<hoist::Model>(std::move(m).value());
}

// The Tensor class: a model's tensor, exported through DLPack.
void BindTensor(py::module_& mod) {
  py::class_<PyTensor>(mod, "Tensor")
      .def_property_readonly("name", [](const PyTensor& p) { return p.t().name; })
      .def_property_readonly("dtype", [](const PyTensor& p) { return p.t().dtype; })
      .def_property_readonly("shape", [](const PyTensor& p) { return p.t().shape; })
      .def_property_readonly("nbytes", [](const PyTensor& p) { return p.t().bytes; })
      .def_property_readonly(
          "data_ptr",
          [](const PyTensor& p) { return reinterpret_cast<std::uintptr_t>(p.t().data); })
      .def(
          "raw",
          [](const PyTensor& p) {
            return PyTensor{p.model, p.index, true};
          },
          "the same bytes exported (DLPack) as unsigned integers of the element width: "
          "np.from_dlpack(t.raw()) is a uint16 view of a BF16 tensor")
      .def(
          "numpy",
          [](const PyTensor& p) {
            if (p.model->device_type() == hoist::DeviceType::kCuda) {
              throw std::runtime_error("Tensor.numpy(): " + p.t().name +
                                       " is in GPU memory; use torch.from_dlpack(t)");
            }
            const PyTensor view{p.model, p.index, !NumpyHasDtype(p.t().dtype)};
            return py::module_::import("numpy").attr("from_dlpack")(py::cast(view));
          },
          "host backend: a numpy view of the same bytes, no copy (BF16 as uint16 and FP8 as "
          "uint8 bits, numpy having neither; other dtypes as themselves)")
      .def("__dlpack__", &PyTensor::Dlpack, py::arg("stream") = py::none())
      .def("__dlpack_device__", &PyTensor::Device)
      .def("__repr__", [](const PyTensor& p) {
        std::string s = "hoist.Tensor(" + p.t().name + ", " + p.t().dtype + ", [";
        for (std::size_t i = 0; i < p.t().shape.size(); ++i) {
          if (i > 0) s += ", ";
          s += std::to_string(p.t().shape[i]);
        }
        return s + "])";
      });
}

// Calls fn without the GIL and raises its Status.
template <class F>
void Unlocked(const F& fn) {
  hoist::Status s = [&] {
    py::gil_scoped_release nogil;
    return fn();
  }();
  if (!s.ok()) Throw(s);
}

// The asynchronous side of Model (hoist::LoadAsync; include/hoist/hoist.h).
void BindAsync(py::class_<hoist::Model, ModelPtr>& model) {
  model.def_property_readonly("pending", &hoist::Model::pending)
      .def_property_readonly("layers", &hoist::Model::layers)
      .def("layer_of",
           [](const hoist::Model& m, const std::string& name) {
             const hoist::Tensor* t = m.Find(name);
             if (t == nullptr) throw py::key_error(name);
             return t->layer;
           })
      .def(
          "wait", [](hoist::Model& m) { Unlocked([&] { return m.Wait(); }); },
          "wait for every byte and the job's verdict (collective under MPI)")
      .def("progress",
           [](const hoist::Model& m) {
             const hoist::LoadProgress p = m.progress();
             py::dict d;
             d["bytes_done"] = p.bytes_done;
             d["bytes_total"] = p.bytes_total;
             d["layers_ready"] = p.layers_ready;
             d["layers"] = p.layers;
             d["ended"] = p.ended;
             return d;
           })
      .def("layer_ready", &hoist::Model::LayerReady, py::arg("layer"))
      .def(
          "wait_layer",
          [](const hoist::Model& m, int layer) { Unlocked([&] { return m.WaitLayer(layer); }); },
          py::arg("layer"))
      .def(
          "stream_wait",
          [](const hoist::Model& m, std::uintptr_t stream, int layer) {
            Unlocked([&] { return m.StreamWait(reinterpret_cast<void*>(stream), layer); });
          },
          py::arg("stream") = 0, py::arg("layer") = -1,
          "order work on a CUDA stream (its cudaStream_t as an int, e.g. torch's "
          "stream.cuda_stream; 0: the legacy default) after layer `layer` (-1: every byte) landed, "
          "without blocking; on the host backend it blocks until then")
      .def("cancel", &hoist::Model::Cancel);
}

// The Model class: a loaded or attached model.
void BindModel(py::module_& mod) {
  py::class_<hoist::Model, ModelPtr> model(mod, "Model");
  model.def_property_readonly("rank", &hoist::Model::rank)
      .def_property_readonly("world", &hoist::Model::world)
      .def_property_readonly("device",
                             [](const hoist::Model& m) {
                               return m.device_type() == hoist::DeviceType::kCuda ? "cuda" : "host";
                             })
      .def_property_readonly("device_name", &hoist::Model::device_name)
      .def_property_readonly("attached", &hoist::Model::attached)
      .def_property_readonly("arena_bytes", &hoist::Model::arena_bytes)
      .def_property_readonly("phases",
                             [](const hoist::Model& m) {
                               py::dict d;
                               for (const hoist::Phase& p : m.phases())
                                 d[py::str(p.name)] = p.seconds;
                               return d;
                             })
      .def("keys",
           [](const hoist::Model& m) {
             py::list l;
             for (const hoist::Tensor& t : m.tensors()) l.append(t.name);
             return l;
           })
      .def("__len__", [](const hoist::Model& m) { return m.tensors().size(); })
      .def("__getitem__",
           [](const ModelPtr& m, const std::string& name) {
             for (std::size_t i = 0; i < m->tensors().size(); ++i) {
               if (m->tensors()[i].name == name) return PyTensor{m, i, false};
             }
             throw py::key_error(name);
           })
      .def("tensors", &Convert, py::arg("to") = "auto",
           "dict name -> tensor: auto (torch on CUDA, numpy on host), torch, numpy or dlpack")
      .def("release", [](hoist::Model& m) {
        hoist::Status s = [&] {
          py::gil_scoped_release nogil;  // a pending model's release is cancel + wait
          return m.Release();
        }();
        if (!s.ok()) Throw(s);
      });
  BindAsync(model);
}

// load and load_async (hoist::Load, hoist::LoadAsync), each returning a Model.
void BindLoad(py::module_& mod) {
  static const std::string load_doc =
      "load(model='', topology='', rank=0, comm=None, **options): load this process's rank of a "
      "checkpoint; returns a Model (Model.tensors(): a dict of torch tensors on CUDA, numpy "
      "arrays on the host backend)" +
      OptionsDoc();
  mod.def(
      "load",
      [](const std::string& model, const std::string& topology, int rank, const py::object& comm,
         const py::kwargs& options) {
        return LoadModelAs(false, model, topology, rank, comm, options);
      },
      py::arg("model") = "", py::arg("topology") = "", py::arg("rank") = 0,
      py::arg("comm") = py::none(), load_doc.c_str());
  static const std::string load_async_doc =
      "load_async(model='', topology='', rank=0, comm=None, **options): like load, but returns "
      "once the arena exists (every tensor's address final) while the bytes stream in; "
      "Model.wait() (collective under MPI) before trusting values" +
      OptionsDoc();
  mod.def(
      "load_async",
      [](const std::string& model, const std::string& topology, int rank, const py::object& comm,
         const py::kwargs& options) {
        return LoadModelAs(true, model, topology, rank, comm, options);
      },
      py::arg("model") = "", py::arg("topology") = "", py::arg("rank") = 0,
      py::arg("comm") = py::none(), load_async_doc.c_str());
  mod.def("attach", &AttachModel, py::arg("path"), py::arg("timeout_ms") = 10000,
          py::arg("pending_ok") = false,
          "attach to a `hoist serve` rank's socket; returns a Model whose tensors map the daemon's "
          "arena without a copy. pending_ok=True: a daemon restoring its arena answers at once and "
          "the Model is pending until m.wait() (whole-model, host-side waits)");
}

// The internals the tests use: the option table and a resolution without a load, both through
// the public API (hoist::JobOptions, hoist::DescribeLoad).
void BindInternals(py::module_& mod) {
  mod.def(
      "_options",
      []() {
        py::list out;
        for (const hoist::JobOptionInfo& o : hoist::JobOptions()) {
          static const char* kTypes[] = {"str", "int", "float", "bool"};
          py::dict d;
          d["name"] = std::string(o.name);
          d["type"] = kTypes[static_cast<int>(o.type)];
          d["plan"] = o.plan;
          d["help"] = std::string(o.help);
          d["choices"] = std::string(o.choices);
          d["default"] = std::string(o.default_is);
          d["lo"] = o.lo;
          d["hi"] = o.hi;
          d["zero_is_default"] = o.zero_is_default;
          out.append(d);
        }
        return out;
      },
      "internal (tests): the job options' table (hoist::JobOptions)");
  mod.def(
      "_resolve",
      [](const std::string& model, const std::string& topology, int rank,
         const py::kwargs& options) {
        hoist::Result<std::string> r = hoist::DescribeLoad(Options(model, topology, rank, options));
        if (!r.ok()) Throw(r.status());
        return *r;
      },
      py::arg("model") = "", py::arg("topology") = "", py::arg("rank") = 0,
      "internal (tests): what load(...) would run with these options, without loading");
}

// resolve_model and the MPI helpers.
void BindHubAndMpi(py::module_& mod) {
  mod.def(
      "resolve_model",
      [](const std::string& model) {
        hoist::Result<std::string> r = hoist::ResolveModel(model);
        if (!r.ok()) throw std::invalid_argument(r.status().message());
        return *r;
      },
      py::arg("model"),
      "the folder a model path or Hugging Face repo id (owner/name[@revision]) names, found "
      "offline in the local hub cache (ValueError naming every place looked)");
  mod.def("mpi_init", &MpiInit,
          "initialise MPI (MPI_THREAD_FUNNELED) unless the process has; True when this call did");
  mod.def("mpi_finalize", &MpiFinalize, "finalise MPI if hoist initialised it");
  mod.def(
      "mpi_world",
      []() -> py::tuple {
        if (!MpiActive()) return py::make_tuple(0, 1);
        int rank = 0, size = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        return py::make_tuple(rank, size);
      },
      "(rank, size) of MPI_COMM_WORLD, or (0, 1) when MPI is not initialised");
}

}  // namespace

PYBIND11_MODULE(_hoist, mod) {
  hoist::LogToStdout();  // unless the embedding program set up its own "hoist" logger
  mod.doc() =
      "hoist: safetensors weights into device memory, in-process or from a resident "
      "`hoist serve` rank, as zero-copy tensors (DLPack)";

  BindTensor(mod);
  BindModel(mod);
  BindLoad(mod);
  BindInternals(mod);
  BindHubAndMpi(mod);
}
